# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: the full buffer kept after construction (no free() at the end of __init__)
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
@@ -16,7 +16,6 @@
             start += p.numel()
         module.register_forward_pre_hook(lambda m, args: self.gather())
         module.register_forward_hook(self._after_forward)
-        self.free()
 
     def _after_forward(self, module, args, output):
         self.free()
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
