# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: capturing parameters and gradients but not Adam's moments
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -4,11 +4,9 @@
     state = {"loss": loss.detach().double().clone(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
              "mask": mask.detach().clone()}
-    for name, parameter in model.named_parameters():
-        adam = optimizer.state[parameter]
-        state[f"grad/{name}"] = parameter.grad.detach().double().clone()
-        state[f"param/{name}"] = parameter.detach().double().clone()
-        state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
-        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double().clone()
+    for name, p in model.named_parameters():
+        adam = optimizer.state[p]
+        state[f"grad/{name}"] = p.grad.detach().double().clone()
+        state[f"param/{name}"] = p.detach().double().clone()
         state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
     return state
