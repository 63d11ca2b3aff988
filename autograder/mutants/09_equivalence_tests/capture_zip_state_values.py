# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: pairing model.named_parameters() with optimizer.state.values() by position (the state's insertion order)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -4,8 +4,7 @@
     state = {"loss": loss.detach().double().clone(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
              "mask": mask.detach().clone()}
-    for name, parameter in model.named_parameters():
-        adam = optimizer.state[parameter]
+    for (name, parameter), adam in zip(model.named_parameters(), optimizer.state.values()):
         state[f"grad/{name}"] = parameter.grad.detach().double().clone()
         state[f"param/{name}"] = parameter.detach().double().clone()
         state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
