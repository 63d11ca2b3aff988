# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: SHARD_GRAD_OP instead of FULL_SHARD: the unit stays gathered from its forward to its backward (one all-gather less, every unit's full parameters alive at once)
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
@@ -19,9 +19,8 @@
         self.free()
 
     def _after_forward(self, module, args, output):
-        self.free()
-        if output.requires_grad:
-            output.register_hook(lambda g: self.gather())
+        if not output.requires_grad:
+            self.free()
 
     def gather(self) -> None:
         buffer = self.full.untyped_storage()
@@ -34,9 +33,9 @@
 
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
