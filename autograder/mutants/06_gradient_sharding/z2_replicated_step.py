# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: skipping the sharding: replicated training (all-reduce every gradient, clip_grad_norm_, one optimizer over all parameters)
# caught_by: test_zero2_kept_and_sent
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_optimizer
+++ mutant
@@ -4,33 +4,18 @@
     def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
         self.params = list(params)
         self.max_norm, self.group = max_norm, group
-        self.world_size = dist.get_world_size(group)
-        self.numel = sum(p.numel() for p in self.params)
-        self.shard = math.ceil(self.numel / self.world_size)
-        start, stop = owned_range(self.numel, self.world_size, dist.get_rank(group))
-        # this rank's slice of the flat parameters, padded to S elements: the tensor the inner optimizer steps
-        self.master = torch.zeros(self.shard, device=self.params[0].device)
-        self.master[: stop - start] = torch.cat([p.detach().reshape(-1) for p in self.params])[start:stop]
-        self.optimizer = make_optimizer([self.master])
+        self.optimizer = make_optimizer(self.params)
 
     def step(self) -> None:
-        """Reduce-scatter the gradient, clip by the global norm, update the owned slice, rebuild the model."""
+        """All-reduce each gradient, clip, step every parameter on every rank."""
         with torch.no_grad():
-            flat = torch.cat([p.grad.reshape(-1) for p in self.params])
-            self.zero_grad()  # the full local gradient is not kept
-            owned = reduce_scatter_gradients(flat, self.group)
-            del flat
-            if self.max_norm is not None:
-                sharded_clip_grad_norm_([owned], self.max_norm, self.group)
-            self.master.grad = owned
-            self.optimizer.step()
-            self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
-            dist.all_gather_single(full, self.master, group=self.group)
-            offset = 0
             for p in self.params:
-                p.copy_(full[offset:offset + p.numel()].view_as(p))
-                offset += p.numel()
+                dist.all_reduce(p.grad, group=self.group)
+                p.grad /= dist.get_world_size(self.group)
+        if self.max_norm is not None:
+            torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
+        self.optimizer.step()
+        self.zero_grad()
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
