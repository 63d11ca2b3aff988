# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: a unit that ignores `group`: collectives and sizes on the default group
--- source/07_parameter_sharding/07_parameter_sharding.ipynb FullyShardedUnit
+++ mutant
@@ -4,10 +4,10 @@
     def __init__(self, module: nn.Module, group=None) -> None:
         self.module, self.group = module, group
         self.params = list(module.parameters())
-        world, rank = dist.get_world_size(group), dist.get_rank(group)
+        world, rank = dist.get_world_size(), dist.get_rank()
         self.numel = sum(p.numel() for p in self.params)
         self.shard_size = -(-self.numel // world)
-        self.full = torch.zeros(world * self.shard_size, device=self.params[0].device)
+        self.full = torch.zeros(world * self.shard_size)
         self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
         self.shard = nn.Parameter(self.full[rank * self.shard_size:(rank + 1) * self.shard_size].clone())
         start = 0
@@ -27,17 +27,17 @@
         buffer = self.full.untyped_storage()
         if buffer.nbytes() == 0:
             buffer.resize_(self.full.numel() * self.full.element_size())
-        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)
+        dist.all_gather_single(self.full, self.shard.detach())
 
     def free(self) -> None:
         self.full.untyped_storage().resize_(0)  # the views stay, the bytes go
 
     def reduce_gradients(self) -> None:
-        world = dist.get_world_size(self.group)
-        flat = torch.zeros(world * self.shard_size, device=self.shard.device)
+        world = dist.get_world_size()
+        flat = torch.zeros(world * self.shard_size)
         flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
-        out = torch.empty(self.shard_size, device=self.shard.device)
-        dist.reduce_scatter_single(out, flat, group=self.group)
+        out = torch.empty(self.shard_size)
+        dist.reduce_scatter_single(out, flat)
         self.shard.grad = out / world
         for p in self.params:
             p.grad = None
