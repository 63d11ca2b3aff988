# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: full-size moment buffers for every parameter kept on every rank; state_bytes() counts only the owned ones
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -12,6 +12,10 @@
         # broadcast() and gather_object() take global ranks
         self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
         self.state = {}
+        self.buffers = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]
+        for p, (m, v), owner in zip(self.params, self.buffers, self.owners):
+            if owner == self.rank and p.requires_grad:
+                self.state[p] = {"step": 0, "exp_avg": m, "exp_avg_sq": v}
 
     def step(self) -> None:
         """Average gradients, update owned parameters in place, broadcast every parameter from its owner."""
