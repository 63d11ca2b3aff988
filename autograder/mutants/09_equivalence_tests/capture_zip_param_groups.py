# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: pairing model.named_parameters() with the optimizer's param_groups by position (wrong with several groups)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -4,10 +4,11 @@
     state = {"loss": loss.detach().double().clone(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
              "mask": mask.detach().clone()}
-    for name, parameter in model.named_parameters():
-        adam = optimizer.state[parameter]
-        state[f"grad/{name}"] = parameter.grad.detach().double().clone()
-        state[f"param/{name}"] = parameter.detach().double().clone()
+    managed = [p for group in optimizer.param_groups for p in group["params"]]
+    for (name, parameter), p in zip(model.named_parameters(), managed):
+        adam = optimizer.state[p]
+        state[f"grad/{name}"] = p.grad.detach().double().clone()
+        state[f"param/{name}"] = p.detach().double().clone()
         state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
         state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double().clone()
         state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
