# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: optimizer ignores the partition rule and assigns owners round-robin (not ZeRO's owners, unbalanced state)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb sharded_adam
+++ mutant
@@ -8,7 +8,7 @@
         self.group = group
         self.world_size = dist.get_world_size(group)
         self.rank = dist.get_rank(group)
-        self.owners = partition_parameters([p.numel() for p in self.params], self.world_size)
+        self.owners = [i % self.world_size for i in range(len(self.params))]
         # broadcast() and gather_object() take global ranks
         self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
         self.state = {}
