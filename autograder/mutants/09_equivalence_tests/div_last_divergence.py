# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: reporting the last diverging step instead of the first
--- source/09_equivalence_tests/09_equivalence_tests.ipynb first_divergence
+++ mutant
@@ -1,7 +1,8 @@
 def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
     """(first differing step, its differing keys), or None."""
+    found = None
     for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
         differing = compare_update_states(ref, cand, tolerances)
         if differing:
-            return step, differing
-    return None
+            found = step, differing
+    return found
