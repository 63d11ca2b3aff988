# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: broadcast/gather from the owner's group rank instead of its global rank (breaks on a subgroup)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -10,7 +10,7 @@
         self.rank = dist.get_rank(group)
         self.owners = partition_parameters([p.numel() for p in self.params], self.world_size)
         # broadcast() and gather_object() take global ranks
-        self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
+        self.global_rank = list(range(self.world_size))
         self.state = {}
 
     def step(self) -> None:
