# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: the mean error over the steps instead of the worst
--- source/09_equivalence_tests/09_equivalence_tests.ipynb tolerance
+++ mutant
@@ -1,11 +1,10 @@
 def calibrate_tolerances(reference_steps: list[dict], calibration_steps: list[dict]) -> dict[str, float]:
     """Per key (not step/, not bool): 4 * max(float32 eps, worst relative 2-norm error of the calibration run)."""
-    floor = torch.finfo(torch.float32).eps
     tolerances = {}
     for key, first in reference_steps[0].items():
         if key.startswith("step/") or first.dtype == torch.bool:
             continue
-        worst = max(((c[key].double() - r[key].double()).norm() / r[key].double().norm()).item()
-                    for r, c in zip(reference_steps, calibration_steps))
-        tolerances[key] = 4 * max(floor, worst)
+        errors = [((c[key].double() - r[key].double()).norm() / r[key].double().norm()).item()
+                  for r, c in zip(reference_steps, calibration_steps)]
+        tolerances[key] = 4 * max(torch.finfo(torch.float32).eps, sum(errors) / len(errors))
     return tolerances
