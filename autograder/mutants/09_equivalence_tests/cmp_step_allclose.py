# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: step counters compared with default torch.allclose (equal at 10**6) instead of exactly
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -6,7 +6,10 @@
         c = candidate.get(key)
         if c is None or c.shape != r.shape:
             differing.append(key)
-        elif key.startswith("step/") or r.dtype == torch.bool:
+        elif key.startswith("step/"):
+            if not torch.allclose(c.double(), r.double()):
+                differing.append(key)
+        elif r.dtype == torch.bool:
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
         elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
