# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: step 0 skipped (counted as the resumed checkpoint)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb first_divergence
+++ mutant
@@ -1,7 +1,7 @@
 def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
     """(first differing step, its differing keys), or None."""
-    for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
-        differing = compare_update_states(ref, cand, tolerances)
+    for step in range(1, len(reference_steps)):
+        differing = compare_update_states(reference_steps[step], candidate_steps[step], tolerances)
         if differing:
             return step, differing
     return None
