# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: state allocated in __init__ for every owned parameter that requires grad (not lazily at its first update)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -11,7 +11,8 @@
         self.owners = partition_parameters([p.numel() for p in self.params], self.world_size)
         # broadcast() and gather_object() take global ranks
         self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
-        self.state = {}
+        self.state = {p: {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
+                      for p, o in zip(self.params, self.owners) if o == self.rank and p.requires_grad}
 
     def step(self) -> None:
         """Average gradients, update owned parameters in place, broadcast every parameter from its owner."""
