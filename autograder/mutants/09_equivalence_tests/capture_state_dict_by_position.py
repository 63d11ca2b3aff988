# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: Adam's state read from optimizer.state_dict() by position: the wrong parameter's state with several parameter groups
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -4,8 +4,9 @@
     state = {"loss": loss.detach().double().clone(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
              "mask": mask.detach().clone()}
-    for name, parameter in model.named_parameters():
-        adam = optimizer.state[parameter]
+    adam_state = optimizer.state_dict()["state"]
+    for index, (name, parameter) in enumerate(model.named_parameters()):
+        adam = adam_state[index]
         state[f"grad/{name}"] = parameter.grad.detach().double().clone()
         state[f"param/{name}"] = parameter.detach().double().clone()
         state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
