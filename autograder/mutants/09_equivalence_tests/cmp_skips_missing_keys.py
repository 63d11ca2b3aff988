# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: skipping keys the candidate does not have
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -4,11 +4,13 @@
     differing = []
     for key, r in reference.items():
         c = candidate.get(key)
-        if c is None or c.shape != r.shape:
+        if c is None:
+            continue
+        if c.shape != r.shape:
             differing.append(key)
         elif key.startswith("step/") or r.dtype == torch.bool:
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+        elif (c.double() - r.double()).norm() > tolerances[key] * r.double().norm() + 1e-12:
+            differing.append(key)
     return sorted(differing)
