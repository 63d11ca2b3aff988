# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: keeping a persistent padded flat gradient buffer of N x S elements in the optimizer
# caught_by: test_zero2_kept_and_sent
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_optimizer
+++ mutant
@@ -9,14 +9,15 @@
         self.shard = math.ceil(self.numel / self.world_size)
         start, stop = owned_range(self.numel, self.world_size, dist.get_rank(group))
         # this rank's slice of the flat parameters, padded to S elements: the tensor the inner optimizer steps
-        self.master = torch.zeros(self.shard, device=self.params[0].device)
+        self.master = torch.zeros(self.shard)
         self.master[: stop - start] = torch.cat([p.detach().reshape(-1) for p in self.params])[start:stop]
         self.optimizer = make_optimizer([self.master])
 
     def step(self) -> None:
         """Reduce-scatter the gradient, clip by the global norm, update the owned slice, rebuild the model."""
         with torch.no_grad():
-            flat = torch.cat([p.grad.reshape(-1) for p in self.params])
+            self.flat = torch.cat([p.grad.reshape(-1) for p in self.params])
+            flat = self.flat
             self.zero_grad()  # the full local gradient is not kept
             owned = reduce_scatter_gradients(flat, self.group)
             del flat
@@ -25,7 +26,7 @@
             self.master.grad = owned
             self.optimizer.step()
             self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
+            full = torch.empty(self.shard * self.world_size)
             dist.all_gather_single(full, self.master, group=self.group)
             offset = 0
             for p in self.params:
