# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_measured
# catches: skips the hard part: whole parameters, largest first to the least-loaded rank (balanced, never split), so a parameter larger than P/N busts the budget
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb flat_adam
+++ mutant
@@ -6,47 +6,45 @@
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
+        # whole parameters, largest first to the least-loaded rank: balanced, but never split
+        load = [0] * self.world_size
+        self.owned = []
+        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
+            owner = load.index(min(load))
+            load[owner] += self.params[i].numel()
+            if owner == self.rank:
+                self.owned.append(i)
+        self.state = {i: (torch.zeros(self.params[i].numel()), torch.zeros(self.params[i].numel())) for i in self.owned}
+        self.t = 0
 
     def step(self) -> None:
-        """One ZeRO-1 Adam step (clipped when max_norm is set), called by every rank of the group."""
+        """All-reduce the gradient, update owned parameters, rebuild the model with a sum of disjoint parts."""
         beta1, beta2 = self.betas
-
-        def padded(tensors) -> torch.Tensor:  # a new flat tensor: the tensors in order, then zeros
-            flat = tensors[0].new_zeros(self.shard * self.world_size)
-            flat[:sum(t.numel() for t in tensors)] = torch.cat([t.reshape(-1) for t in tensors])
-            return flat
-
         with torch.no_grad():
-            grad = padded([p.grad for p in self.params])
+            grad = torch.cat([p.grad.reshape(-1) for p in self.params])
             dist.all_reduce(grad, group=self.group)
-            grad.div_(self.world_size)
+            grad /= self.world_size
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
+                grad *= torch.clamp(self.max_norm / (grad.norm() + 1e-6), max=1.0)
+            starts = [0]
             for p in self.params:
-                p.copy_(full[offset:offset + p.numel()].view_as(p))
-                offset += p.numel()
+                starts.append(starts[-1] + p.numel())
+            self.t += 1
+            new = torch.zeros(starts[-1])
+            for i in self.owned:
+                theta = self.params[i].reshape(-1)
+                g = grad[starts[i]:starts[i + 1]] + self.weight_decay * theta
+                m, v = self.state[i]
+                m.mul_(beta1).add_(g, alpha=1 - beta1)
+                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
+                denom = v.sqrt() / math.sqrt(1 - beta2 ** self.t) + self.eps
+                new[starts[i]:starts[i + 1]] = theta - self.lr / (1 - beta1 ** self.t) * m / denom
+            dist.all_reduce(new, group=self.group)
+            for p, piece in zip(self.params, new.split([p.numel() for p in self.params])):
+                p.copy_(piece.view_as(p))
 
     def zero_grad(self) -> None:
         """Set every parameter's .grad to None."""
         for p in self.params:
             p.grad = None
-
