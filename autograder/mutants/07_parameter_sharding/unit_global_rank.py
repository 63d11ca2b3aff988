# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: the shard chosen by the global rank instead of the rank within `group`
--- source/07_parameter_sharding/07_parameter_sharding.ipynb FullyShardedUnit
+++ mutant
@@ -4,10 +4,10 @@
     def __init__(self, module: nn.Module, group=None) -> None:
         self.module, self.group = module, group
         self.params = list(module.parameters())
-        world, rank = dist.get_world_size(group), dist.get_rank(group)
+        world, rank = dist.get_world_size(group), dist.get_rank()
         self.numel = sum(p.numel() for p in self.params)
         self.shard_size = -(-self.numel // world)
-        self.full = torch.zeros(world * self.shard_size, device=self.params[0].device)
+        self.full = torch.zeros(world * self.shard_size)
         self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
         self.shard = nn.Parameter(self.full[rank * self.shard_size:(rank + 1) * self.shard_size].clone())
         start = 0
@@ -34,9 +34,9 @@
 
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
