# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: computing in float32: counters above 2**24 (and errors below float32 rounding) vanish
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -7,8 +7,8 @@
         if c is None or c.shape != r.shape:
             differing.append(key)
         elif key.startswith("step/") or r.dtype == torch.bool:
-            if not torch.equal(c.to(r.dtype), r):
+            if not torch.equal(c.float(), r.float()):
                 differing.append(key)
-        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+        elif not (c.float() - r.float()).norm() <= tolerances[key] * r.float().norm() + 1e-12:
+            differing.append(key)
     return sorted(differing)
