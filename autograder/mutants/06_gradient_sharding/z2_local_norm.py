# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: clipping each rank's slice by its own norm instead of the global one
# caught_by: test_zero2_training
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_optimizer
+++ mutant
@@ -9,7 +9,7 @@
         self.shard = math.ceil(self.numel / self.world_size)
         start, stop = owned_range(self.numel, self.world_size, dist.get_rank(group))
         # this rank's slice of the flat parameters, padded to S elements: the tensor the inner optimizer steps
-        self.master = torch.zeros(self.shard, device=self.params[0].device)
+        self.master = torch.zeros(self.shard)
         self.master[: stop - start] = torch.cat([p.detach().reshape(-1) for p in self.params])[start:stop]
         self.optimizer = make_optimizer([self.master])
 
@@ -21,11 +21,11 @@
             owned = reduce_scatter_gradients(flat, self.group)
             del flat
             if self.max_norm is not None:
-                sharded_clip_grad_norm_([owned], self.max_norm, self.group)
+                owned.mul_(torch.clamp(self.max_norm / (owned.norm() + 1e-6), max=1.0))
             self.master.grad = owned
             self.optimizer.step()
             self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
+            full = torch.empty(self.shard * self.world_size)
             dist.all_gather_single(full, self.master, group=self.group)
             offset = 0
             for p in self.params:
