# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: building on the removed plot helper helpers.l09_equivalence_tests.plots.checker_verdicts
--- source/09_equivalence_tests/09_equivalence_tests.ipynb first_divergence
+++ mutant
@@ -1,7 +1,6 @@
 def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
     """(first differing step, its differing keys), or None."""
-    for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
-        differing = compare_update_states(ref, cand, tolerances)
-        if differing:
-            return step, differing
-    return None
+    from helpers.l09_equivalence_tests import plots as equivalence_plots
+    verdicts = equivalence_plots.checker_verdicts(reference_steps, {"run": (tolerances, candidate_steps)})
+    step = verdicts["update state (reference)"]["run"]
+    return None if step is None else (step, compare_update_states(reference_steps[step], candidate_steps[step], tolerances))
