# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: averaging the gradients with an all-reduce and keeping this rank's slice: right shard.grad, twice the reduce-scatter's bytes
--- source/07_parameter_sharding/07_parameter_sharding.ipynb FullyShardedUnit
+++ mutant
@@ -7,7 +7,7 @@
         world, rank = dist.get_world_size(group), dist.get_rank(group)
         self.numel = sum(p.numel() for p in self.params)
         self.shard_size = -(-self.numel // world)
-        self.full = torch.zeros(world * self.shard_size, device=self.params[0].device)
+        self.full = torch.zeros(world * self.shard_size)
         self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
         self.shard = nn.Parameter(self.full[rank * self.shard_size:(rank + 1) * self.shard_size].clone())
         start = 0
@@ -34,10 +34,10 @@
 
     def reduce_gradients(self) -> None:
         world = dist.get_world_size(self.group)
-        flat = torch.zeros(world * self.shard_size, device=self.shard.device)
+        flat = torch.zeros(world * self.shard_size)
         flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
-        out = torch.empty(self.shard_size, device=self.shard.device)
-        dist.reduce_scatter_single(out, flat, group=self.group)
-        self.shard.grad = out / world
+        dist.all_reduce(flat, group=self.group)
+        rank = dist.get_rank(self.group)
+        self.shard.grad = flat[rank * self.shard_size:(rank + 1) * self.shard_size] / world
         for p in self.params:
             p.grad = None
