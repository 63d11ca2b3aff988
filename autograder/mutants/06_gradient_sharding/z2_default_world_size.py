# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: using the default group's world size and rank instead of the group's (wrong on a subgroup)
# caught_by: test_zero2_training
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_optimizer
+++ mutant
@@ -4,12 +4,12 @@
     def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
         self.params = list(params)
         self.max_norm, self.group = max_norm, group
-        self.world_size = dist.get_world_size(group)
+        self.world_size = dist.get_world_size()
         self.numel = sum(p.numel() for p in self.params)
         self.shard = math.ceil(self.numel / self.world_size)
-        start, stop = owned_range(self.numel, self.world_size, dist.get_rank(group))
+        start, stop = owned_range(self.numel, self.world_size, dist.get_rank())
         # this rank's slice of the flat parameters, padded to S elements: the tensor the inner optimizer steps
-        self.master = torch.zeros(self.shard, device=self.params[0].device)
+        self.master = torch.zeros(self.shard)
         self.master[: stop - start] = torch.cat([p.detach().reshape(-1) for p in self.params])[start:stop]
         self.optimizer = make_optimizer([self.master])
 
@@ -25,7 +25,7 @@
             self.master.grad = owned
             self.optimizer.step()
             self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
+            full = torch.empty(self.shard * self.world_size)
             dist.all_gather_single(full, self.master, group=self.group)
             offset = 0
             for p in self.params:
