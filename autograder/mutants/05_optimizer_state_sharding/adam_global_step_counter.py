# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: one optimizer-wide step counter (a parameter first used at step 2 gets the bias correction of t = 2)
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
@@ -26,7 +28,7 @@
                     if p not in self.state:
                         self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                     s = self.state[p]
-                    s["step"] += 1
+                    s["step"] = self.steps_taken
                     if self.weight_decay != 0:
                         grad = grad.add(p, alpha=self.weight_decay)
                     s["exp_avg"].lerp_(grad, 1 - beta1)
