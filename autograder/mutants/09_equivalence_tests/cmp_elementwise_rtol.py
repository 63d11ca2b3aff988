# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: elementwise relative tolerance (torch.allclose) instead of the tensor's 2-norm
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -9,6 +9,6 @@
         elif key.startswith("step/") or r.dtype == torch.bool:
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+        elif not torch.allclose(c.double(), r.double(), rtol=tolerances[key], atol=1e-12):
+            differing.append(key)
     return sorted(differing)
