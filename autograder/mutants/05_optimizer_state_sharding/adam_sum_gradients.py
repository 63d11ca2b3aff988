# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: gradients summed over ranks, never divided by N (Adam hides it in the params, not in the moments)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -21,7 +21,7 @@
                 if p.grad is None:
                     continue
                 dist.all_reduce(p.grad, group=self.group)
-                grad = p.grad.div_(self.world_size)
+                grad = p.grad
                 if owner == self.rank:
                     if p not in self.state:
                         self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
