# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_measured
# catches: floor(P/N) elements per rank and the remainder on the last rank: it holds more than ceil(P/N) when P mod N >= 2
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb flat_adam
+++ mutant
@@ -6,47 +6,60 @@
         self.params = list(params)
         self.lr, self.betas, self.eps, self.weight_decay, self.max_norm = lr, tuple(betas), eps, weight_decay, max_norm
         self.group = group
-        self.world_size = dist.get_world_size(group)
-        numel = sum(p.numel() for p in self.params)
-        self.shard = math.ceil(numel / self.world_size)  # elements per rank; the last shard is padded with zeros
-        start = dist.get_rank(group) * self.shard
-        self.mine = slice(start, start + self.shard)
-        self.exp_avg = torch.zeros(self.shard, device=self.params[0].device)
-        self.exp_avg_sq = torch.zeros(self.shard, device=self.params[0].device)
-        self.steps = 0
+        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
+        total = sum(p.numel() for p in self.params)
+        self.size = total // self.world_size  # the last rank also takes the remainder
+        self.sources = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
+        self.starts = [0]
+        for p in self.params:
+            self.starts.append(self.starts[-1] + p.numel())
+        lo = self.rank * self.size
+        self.ends = [(r + 1) * self.size if r < self.world_size - 1 else total for r in range(self.world_size)]
+        # per parameter that meets this rank's range: (parameter index, first element in p, in the shard, count)
+        self.pieces = []
+        for i, p in enumerate(self.params):
+            a, b = max(self.starts[i], lo), min(self.starts[i + 1], self.ends[self.rank])
+            if a < b:
+                self.pieces.append((i, a - self.starts[i], a - lo, b - a))
+        self.moments = {i: (torch.zeros(n), torch.zeros(n)) for i, _, _, n in self.pieces}
+        self.t = 0
 
     def step(self) -> None:
-        """One ZeRO-1 Adam step (clipped when max_norm is set), called by every rank of the group."""
+        """Reduce-scatter the gradient, clip by the global norm, update owned pieces, broadcast each shard."""
         beta1, beta2 = self.betas
-
-        def padded(tensors) -> torch.Tensor:  # a new flat tensor: the tensors in order, then zeros
-            flat = tensors[0].new_zeros(self.shard * self.world_size)
-            flat[:sum(t.numel() for t in tensors)] = torch.cat([t.reshape(-1) for t in tensors])
-            return flat
-
+        n = self.world_size
         with torch.no_grad():
-            grad = padded([p.grad for p in self.params])
-            dist.all_reduce(grad, group=self.group)
-            grad.div_(self.world_size)
+            flat = torch.cat([p.grad.reshape(-1) for p in self.params])
+            dist.all_reduce(flat, group=self.group)
+            mine = flat[self.rank * self.size:self.ends[self.rank]] / n
             if self.max_norm is not None:
-                grad.mul_(torch.clamp(self.max_norm / (grad.norm() + 1e-6), max=1.0))  # clip_grad_norm_'s rule
-            g, theta = grad[self.mine], padded(self.params)[self.mine]
-            if self.weight_decay != 0:
-                g = g.add(theta, alpha=self.weight_decay)
-            self.steps += 1
-            self.exp_avg.lerp_(g, 1 - beta1)
-            self.exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
-            denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
-            theta.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1 ** self.steps))
-            full = torch.empty(self.shard * self.world_size, device=self.exp_avg.device)
-            dist.all_gather_into_tensor(full, theta.contiguous(), group=self.group)
-            offset = 0
-            for p in self.params:
-                p.copy_(full[offset:offset + p.numel()].view_as(p))
-                offset += p.numel()
+                square = mine.square().sum()
+                dist.all_reduce(square, group=self.group)
+                mine.mul_(torch.clamp(self.max_norm / (square.sqrt() + 1e-6), max=1.0))
+            self.t += 1
+            bias1, bias2 = 1 - beta1 ** self.t, 1 - beta2 ** self.t
+            for i, first, at, count in self.pieces:
+                theta = self.params[i].view(-1)[first:first + count]
+                g = mine[at:at + count]
+                if self.weight_decay != 0:
+                    g = g + self.weight_decay * theta
+                m, v = self.moments[i]
+                m.mul_(beta1).add_(g, alpha=1 - beta1)
+                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
+                theta.sub_(self.lr / bias1 * m / (v.sqrt() / math.sqrt(bias2) + self.eps))
+            for owner in range(n):
+                lo = owner * self.size
+                shard = torch.zeros(self.ends[owner] - lo)
+                if owner == self.rank:
+                    for i, first, at, count in self.pieces:
+                        shard[at:at + count] = self.params[i].view(-1)[first:first + count]
+                dist.broadcast(shard, src=self.sources[owner], group=self.group)
+                for i, p in enumerate(self.params):
+                    a, b = max(self.starts[i], lo), min(self.starts[i + 1], self.ends[owner])
+                    if a < b:
+                        p.view(-1)[a - self.starts[i]:b - self.starts[i]] = shard[a - lo:b - lo]
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
         for p in self.params:
             p.grad = None
-
