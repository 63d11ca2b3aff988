# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: keeping the caller's mask tensor instead of a copy
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -3,7 +3,7 @@
     """Float64 copies of everything the step read or wrote (mask as bool)."""
     state = {"loss": loss.detach().double().clone(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
-             "mask": mask.detach().clone()}
+             "mask": mask}
     for name, parameter in model.named_parameters():
         adam = optimizer.state[parameter]
         state[f"grad/{name}"] = parameter.grad.detach().double().clone()
