# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: importing the instructor's reference checker from autograder.lessons.l09
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -1,14 +1,5 @@
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
+    from autograder.lessons.l09 import compare_update_states as reference_checker
+    return reference_checker(reference, candidate, tolerances)
