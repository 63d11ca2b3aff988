# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: also flagging keys the candidate has and the reference does not
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_update_states
+++ mutant
@@ -10,5 +10,6 @@
             if not torch.equal(c.to(r.dtype), r):
                 differing.append(key)
         elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
-            differing.append(key)   # "not <=": a NaN error fails every comparison, so it must not pass
+            differing.append(key)
+    differing += [key for key in candidate if key not in reference]
     return sorted(differing)
