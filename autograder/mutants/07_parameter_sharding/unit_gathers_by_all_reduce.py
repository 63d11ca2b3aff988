# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: gathering by an all-reduce of a zero-filled buffer holding only this rank's slice: right values, twice a ring all-gather's bytes
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
@@ -27,16 +27,19 @@
         buffer = self.full.untyped_storage()
         if buffer.nbytes() == 0:
             buffer.resize_(self.full.numel() * self.full.element_size())
-        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)
+        rank, size = dist.get_rank(self.group), self.shard_size
+        self.full.zero_()
+        self.full[rank * size:(rank + 1) * size] = self.shard.detach()
+        dist.all_reduce(self.full, group=self.group)
 
     def free(self) -> None:
         self.full.untyped_storage().resize_(0)  # the views stay, the bytes go
 
     def reduce_gradients(self) -> None:
         world = dist.get_world_size(self.group)
-        flat = torch.zeros(world * self.shard_size, device=self.shard.device)
+        flat = torch.zeros(world * self.shard_size)
         flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
-        out = torch.empty(self.shard_size, device=self.shard.device)
+        out = torch.empty(self.shard_size)
         dist.reduce_scatter_single(out, flat, group=self.group)
         self.shard.grad = out / world
         for p in self.params:
