# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: giving each rank whole parameters (greedy by size, as stage 1's ShardedAdam): a rank that owns a parameter larger than P/N keeps more than ceil(P/N) elements of gradient and state
# caught_by: test_zero2_kept_and_sent
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_optimizer
+++ mutant
@@ -4,33 +4,43 @@
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
+        n = dist.get_world_size(group)
+        load = [0] * n
+        self.owners = [0] * len(self.params)
+        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
+            self.owners[i] = min(range(n), key=lambda r: (load[r], r))
+            load[self.owners[i]] += self.params[i].numel()
+        me = dist.get_rank(group)
+        self.mine = [p for p, r in zip(self.params, self.owners) if r == me]
+        self.optimizer = make_optimizer(self.mine) if self.mine else None
+
+    def _global(self, r: int) -> int:
+        return r if self.group is None else dist.get_global_rank(self.group, r)
 
     def step(self) -> None:
-        """Reduce-scatter the gradient, clip by the global norm, update the owned slice, rebuild the model."""
+        """Reduce each gradient to its owner, clip by the global norm, step owned parameters, broadcast them."""
+        me, n = dist.get_rank(self.group), dist.get_world_size(self.group)
         with torch.no_grad():
-            flat = torch.cat([p.grad.reshape(-1) for p in self.params])
-            self.zero_grad()  # the full local gradient is not kept
-            owned = reduce_scatter_gradients(flat, self.group)
-            del flat
+            for p, r in zip(self.params, self.owners):
+                dist.reduce(p.grad, dst=self._global(r), group=self.group)
+                if r == me:
+                    p.grad /= n
+                else:
+                    p.grad = None
             if self.max_norm is not None:
-                sharded_clip_grad_norm_([owned], self.max_norm, self.group)
-            self.master.grad = owned
+                square = torch.zeros(())
+                for p in self.mine:
+                    square += p.grad.pow(2).sum()
+                dist.all_reduce(square, group=self.group)
+                scale = torch.clamp(self.max_norm / (square.sqrt() + 1e-6), max=1.0)
+                for p in self.mine:
+                    p.grad.mul_(scale)
+        if self.optimizer is not None:
             self.optimizer.step()
-            self.master.grad = None
-            full = torch.empty(self.shard * self.world_size, device=self.master.device)
-            dist.all_gather_single(full, self.master, group=self.group)
-            offset = 0
-            for p in self.params:
-                p.copy_(full[offset:offset + p.numel()].view_as(p))
-                offset += p.numel()
+        self.zero_grad()
+        with torch.no_grad():
+            for p, r in zip(self.params, self.owners):
+                dist.broadcast(p, src=self._global(r), group=self.group)
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
