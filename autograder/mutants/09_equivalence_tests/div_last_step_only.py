# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: comparing only the final step
--- source/09_equivalence_tests/09_equivalence_tests.ipynb first_divergence
+++ mutant
@@ -1,6 +1,6 @@
 def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
     """(first differing step, its differing keys), or None."""
-    for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
+    for step, (ref, cand) in enumerate(list(zip(reference_steps, candidate_steps))[-1:]):
         differing = compare_update_states(ref, cand, tolerances)
         if differing:
             return step, differing
