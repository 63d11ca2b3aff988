# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: shards of n // N elements: the tail of the flat vector is lost when n % N != 0
--- source/07_parameter_sharding/07_parameter_sharding.ipynb FullyShardedUnit
+++ mutant
@@ -6,14 +6,14 @@
         self.params = list(module.parameters())
         world, rank = dist.get_world_size(group), dist.get_rank(group)
         self.numel = sum(p.numel() for p in self.params)
-        self.shard_size = -(-self.numel // world)
-        self.full = torch.zeros(world * self.shard_size, device=self.params[0].device)
+        self.shard_size = self.numel // world
+        self.full = torch.zeros(world * self.shard_size)
         self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
         self.shard = nn.Parameter(self.full[rank * self.shard_size:(rank + 1) * self.shard_size].clone())
-        start = 0
+        offset = 0
         for p in self.params:
-            p.data = self.full[start:start + p.numel()].view(p.shape)
-            start += p.numel()
+            p.data = self.full[offset:offset + p.numel()].view_as(p)
+            offset += p.numel()
         module.register_forward_pre_hook(lambda m, args: self.gather())
         module.register_forward_hook(self._after_forward)
         self.free()
@@ -21,22 +21,22 @@
     def _after_forward(self, module, args, output):
         self.free()
         if output.requires_grad:
-            output.register_hook(lambda g: self.gather())
+            output.register_hook(lambda grad: self.gather())
 
     def gather(self) -> None:
-        buffer = self.full.untyped_storage()
-        if buffer.nbytes() == 0:
-            buffer.resize_(self.full.numel() * self.full.element_size())
+        storage = self.full.untyped_storage()
+        if storage.nbytes() == 0:
+            storage.resize_(self.full.numel() * self.full.element_size())
         dist.all_gather_single(self.full, self.shard.detach(), group=self.group)
 
     def free(self) -> None:
-        self.full.untyped_storage().resize_(0)  # the views stay, the bytes go
+        self.full.untyped_storage().resize_(0)
 
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
