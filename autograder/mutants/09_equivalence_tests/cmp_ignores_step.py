# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: ignoring the step counter
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -2,13 +2,13 @@
                           tolerances: dict[str, float]) -> list[str]:
     """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
     differing = []
-    for key, r in reference.items():
+    for key, r in [(k, v) for k, v in reference.items() if not k.startswith("step/")]:
         c = candidate.get(key)
         if c is None or c.shape != r.shape:
             differing.append(key)
         elif key.startswith("step/") or r.dtype == torch.bool:
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+        elif (c.double() - r.double()).norm() > tolerances[key] * r.double().norm() + 1e-12:
+            differing.append(key)
     return sorted(differing)
