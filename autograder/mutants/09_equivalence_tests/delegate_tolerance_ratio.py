# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: building on the removed plot helpers tolerance_ratio / relative_error
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -1,14 +1,6 @@
 def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                           tolerances: dict[str, float]) -> list[str]:
     """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
-    differing = []
-    for key, r in reference.items():
-        c = candidate.get(key)
-        if c is None or c.shape != r.shape:
-            differing.append(key)
-        elif key.startswith("step/") or r.dtype == torch.bool:
-            if not torch.equal(c.to(r.dtype), r):
-                differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
-    return sorted(differing)
+    from helpers.l09_equivalence_tests import plots as equivalence_plots
+    return sorted(key for key, r in reference.items() if equivalence_plots.tolerance_ratio(
+        r, candidate.get(key), 0.0 if key.startswith("step/") else tolerances[key]) > 1)
