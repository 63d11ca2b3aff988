# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: one tolerance (the largest calibrated) for every key, not each key's own
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -1,6 +1,7 @@
 def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                           tolerances: dict[str, float]) -> list[str]:
     """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
+    loosest = max(tolerances.values())
     differing = []
     for key, r in reference.items():
         c = candidate.get(key)
@@ -9,6 +10,6 @@
         elif key.startswith("step/") or r.dtype == torch.bool:
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+        elif not (c.double() - r.double()).norm() <= loosest * r.double().norm() + 1e-12:
+            differing.append(key)
     return sorted(differing)
