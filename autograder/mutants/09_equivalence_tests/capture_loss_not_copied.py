# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: the loss and clip coefficient kept without a copy (.double() returns them when they are float64)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -1,8 +1,8 @@
 def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                          clip_coef: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
     """Float64 copies of everything the step read or wrote (mask as bool)."""
-    state = {"loss": loss.detach().double().clone(),
-             "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
+    state = {"loss": loss.detach().double(),
+             "clip_coef": torch.as_tensor(clip_coef).detach().double(),
              "mask": mask.detach().clone()}
     for name, parameter in model.named_parameters():
         adam = optimizer.state[parameter]
