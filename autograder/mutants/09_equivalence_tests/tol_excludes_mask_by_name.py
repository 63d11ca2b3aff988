# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: excluding the key named mask instead of every bool tensor
--- source/09_equivalence_tests/09_equivalence_tests.ipynb tolerance
+++ mutant
@@ -3,7 +3,7 @@
     floor = torch.finfo(torch.float32).eps
     tolerances = {}
     for key, first in reference_steps[0].items():
-        if key.startswith("step/") or first.dtype == torch.bool:
+        if key.startswith("step/") or key == "mask":
             continue
         worst = max(((c[key].double() - r[key].double()).norm() / r[key].double().norm()).item()
                     for r, c in zip(reference_steps, calibration_steps))
