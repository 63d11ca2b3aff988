# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: per-parameter step counts stored, but the bias correction uses the number of step() calls
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -12,10 +12,12 @@
         # broadcast() and gather_object() take global ranks
         self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
         self.state = {}
+        self.steps_taken = 0
 
     def step(self) -> None:
         """Average gradients, update owned parameters in place, broadcast every parameter from its owner."""
         beta1, beta2 = self.betas
+        self.steps_taken += 1
         with torch.no_grad():
             for p, owner in zip(self.params, self.owners):
                 if p.grad is None:
@@ -31,8 +33,8 @@
                         grad = grad.add(p, alpha=self.weight_decay)
                     s["exp_avg"].lerp_(grad, 1 - beta1)
                     s["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
-                    step_size = self.lr / (1 - beta1 ** s["step"])
-                    denom = (s["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** s["step"])).add_(self.eps)
+                    step_size = self.lr / (1 - beta1 ** self.steps_taken)
+                    denom = (s["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** self.steps_taken)).add_(self.eps)
                     p.addcdiv_(s["exp_avg"], denom, value=-step_size)
             for p, owner in zip(self.params, self.owners):
                 if p.grad is not None:
