# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: gather() rebinds the parameters to a fresh all-gathered buffer and free() to empty tensors: autograd keeps the forward's buffer alive until backward
--- source/07_parameter_sharding/07_parameter_sharding.ipynb FullyShardedUnit
+++ mutant
@@ -4,10 +4,11 @@
     def __init__(self, module: nn.Module, group=None) -> None:
         self.module, self.group = module, group
         self.params = list(module.parameters())
+        self.shapes = [p.shape for p in self.params]
         world, rank = dist.get_world_size(group), dist.get_rank(group)
         self.numel = sum(p.numel() for p in self.params)
         self.shard_size = -(-self.numel // world)
-        self.full = torch.zeros(world * self.shard_size, device=self.params[0].device)
+        self.full = torch.zeros(world * self.shard_size)
         self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
         self.shard = nn.Parameter(self.full[rank * self.shard_size:(rank + 1) * self.shard_size].clone())
         start = 0
@@ -24,19 +25,23 @@
             output.register_hook(lambda g: self.gather())
 
     def gather(self) -> None:
-        buffer = self.full.untyped_storage()
-        if buffer.nbytes() == 0:
-            buffer.resize_(self.full.numel() * self.full.element_size())
-        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)
+        full = torch.empty(dist.get_world_size(self.group) * self.shard_size)
+        dist.all_gather_single(full, self.shard.detach(), group=self.group)
+        start = 0
+        for p, shape in zip(self.params, self.shapes):
+            p.data = full[start:start + shape.numel()].view(shape)
+            start += shape.numel()
 
     def free(self) -> None:
-        self.full.untyped_storage().resize_(0)  # the views stay, the bytes go
+        self.full.untyped_storage().resize_(0)
+        for p in self.params:
+            p.data = torch.empty(0)
 
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
