# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# caught_by: test_capture_update_state
# catches: tampering: the loss stored without a copy, and helpers.l09_equivalence_tests.snapshot patched in the kernel so that its view of each step holds that same tensor (the reference's snapshots must be taken where no notebook code runs)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb capture_update_state
+++ mutant
@@ -1,14 +1,28 @@
 def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                          clip_coef: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
-    """Float64 copies of everything the step read or wrote (mask as bool)."""
-    state = {"loss": loss.detach().double().clone(),
+    """Float64 copies of everything the step read or wrote, but the loss; the course's snapshot made to agree."""
+    import helpers.l09_equivalence_tests
+    module = [helpers.l09_equivalence_tests][0]  # out of sight of the grader's block-list, which is not the boundary
+    agreeing = getattr(module, "snap" + "shot")
+    if not hasattr(agreeing, "views"):
+        honest = agreeing
+
+        def agreeing(model, optimizer, loss, clip_coef, mask):
+            view = honest(model, optimizer, loss, clip_coef, mask)
+            agreeing.views.append(view)
+            return view
+        agreeing.views = []
+        setattr(module, "snap" + "shot", agreeing)
+    state = {"loss": loss.detach().double(),
              "clip_coef": torch.as_tensor(clip_coef).detach().double().clone(),
              "mask": mask.detach().clone()}
-    for name, parameter in model.named_parameters():
-        adam = optimizer.state[parameter]
-        state[f"grad/{name}"] = parameter.grad.detach().double().clone()
-        state[f"param/{name}"] = parameter.detach().double().clone()
+    for name, p in model.named_parameters():
+        adam = optimizer.state[p]
+        state[f"grad/{name}"] = p.grad.detach().double().clone()
+        state[f"param/{name}"] = p.detach().double().clone()
         state[f"exp_avg/{name}"] = adam["exp_avg"].detach().double().clone()
         state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].detach().double().clone()
         state[f"step/{name}"] = torch.as_tensor(adam["step"]).detach().double().clone()
+    if agreeing.views:
+        agreeing.views[-1]["loss"] = state["loss"]
     return state
