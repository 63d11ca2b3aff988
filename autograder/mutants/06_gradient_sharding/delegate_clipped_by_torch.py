# assignment: 06_gradient_sharding
# grade_id: sharded_clip_grad_norm_
# catches: gathering every rank's shards and letting the visible check's clip_grad_norm_ wrapper (helpers.l06_gradient_sharding.clipped_by_torch) clip them: the whole gradient travels instead of one number
--- source/06_gradient_sharding/06_gradient_sharding.ipynb sharded_clip_grad_norm_
+++ mutant
@@ -1,11 +1,8 @@
 def sharded_clip_grad_norm_(shard_grads, max_norm: float, group=None) -> torch.Tensor:
     """Clip this rank's shards in place by the global 2-norm over `group`; return that norm."""
-    squares = torch.zeros((), dtype=torch.float32, device=shard_grads[0].device if shard_grads else None)
-    for g in shard_grads:
-        squares += g.detach().float().pow(2).sum()
-    dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
-    total_norm = squares.sqrt()
-    clip_coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
-    for g in shard_grads:
-        g.mul_(clip_coef.to(g.dtype))
-    return total_norm
+    everyone = [None] * dist.get_world_size(group)
+    dist.all_gather_object(everyone, [g.detach().clone() for g in shard_grads], group=group)
+    norm, clipped = grad_sharding.clipped_by_torch(everyone, max_norm)
+    for g, c in zip(shard_grads, clipped[dist.get_rank(group)]):
+        g.copy_(c)
+    return torch.tensor(norm, dtype=torch.float32)
