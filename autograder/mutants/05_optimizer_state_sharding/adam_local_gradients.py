# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: owner steps with its un-averaged local gradient
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -20,8 +20,7 @@
             for p, owner in zip(self.params, self.owners):
                 if p.grad is None:
                     continue
-                dist.all_reduce(p.grad, group=self.group)
-                grad = p.grad.div_(self.world_size)
+                grad = p.grad
                 if owner == self.rank:
                     if p not in self.state:
                         self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
