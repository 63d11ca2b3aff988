# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: summing the ranks' gradients without dividing by N
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
 
@@ -18,14 +18,14 @@
         with torch.no_grad():
             flat = torch.cat([p.grad.reshape(-1) for p in self.params])
             self.zero_grad()  # the full local gradient is not kept
-            owned = reduce_scatter_gradients(flat, self.group)
+            owned = reduce_scatter_gradients(flat, self.group, denominator=1.0)
             del flat
             if self.max_norm is not None:
                 sharded_clip_grad_norm_([owned], self.max_norm, self.group)
             self.master.grad = owned
             self.optimizer.step()
             self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
+            full = torch.empty(self.shard * self.world_size)
             dist.all_gather_single(full, self.master, group=self.group)
             offset = 0
             for p in self.params:
