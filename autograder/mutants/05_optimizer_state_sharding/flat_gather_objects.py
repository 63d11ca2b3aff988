# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_measured
# catches: the updated shards are gathered with all_gather_object (pickled objects) instead of a tensor collective
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb flat_adam
+++ mutant
@@ -11,16 +11,16 @@
         self.shard = math.ceil(numel / self.world_size)  # elements per rank; the last shard is padded with zeros
         start = dist.get_rank(group) * self.shard
         self.mine = slice(start, start + self.shard)
-        self.exp_avg = torch.zeros(self.shard, device=self.params[0].device)
-        self.exp_avg_sq = torch.zeros(self.shard, device=self.params[0].device)
+        self.exp_avg = torch.zeros(self.shard)
+        self.exp_avg_sq = torch.zeros(self.shard)
         self.steps = 0
 
     def step(self) -> None:
-        """One ZeRO-1 Adam step (clipped when max_norm is set), called by every rank of the group."""
+        """Average and clip the gradient, update this rank's shard, give every rank the whole updated model."""
         beta1, beta2 = self.betas
 
         def padded(tensors) -> torch.Tensor:  # a new flat tensor: the tensors in order, then zeros
-            flat = tensors[0].new_zeros(self.shard * self.world_size)
+            flat = torch.zeros(self.shard * self.world_size)
             flat[:sum(t.numel() for t in tensors)] = torch.cat([t.reshape(-1) for t in tensors])
             return flat
 
@@ -38,8 +38,9 @@
             self.exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
             denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
             theta.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1 ** self.steps))
-            full = torch.empty(self.shard * self.world_size, device=self.exp_avg.device)
-            dist.all_gather_into_tensor(full, theta.contiguous(), group=self.group)
+            shards = [None] * self.world_size
+            dist.all_gather_object(shards, theta.clone(), group=self.group)
+            full = torch.cat(shards)
             offset = 0
             for p in self.params:
                 p.copy_(full[offset:offset + p.numel()].view_as(p))
@@ -49,4 +50,3 @@
         """Set every parameter's .grad to None."""
         for p in self.params:
             p.grad = None
-
