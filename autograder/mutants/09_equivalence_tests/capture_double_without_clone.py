# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: .double() without .clone(): a float64 model's live tensors are kept
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -1,14 +1,14 @@
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
-        state[f"grad/{name}"] = parameter.grad.detach().double().clone()
-        state[f"param/{name}"] = parameter.detach().double().clone()
-        state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
-        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double().clone()
-        state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
+        state[f"grad/{name}"] = parameter.grad.detach().double()
+        state[f"param/{name}"] = parameter.detach().double()
+        state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double()
+        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double()
+        state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double()
     return state
