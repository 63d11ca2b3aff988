# assignment: 06_gradient_sharding
# grade_id: sharded_clip_grad_norm_
# catches: clipping by the local shard norm (no collective)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb sharded_clip_grad_norm_
+++ mutant
@@ -1,9 +1,8 @@
 def sharded_clip_grad_norm_(shard_grads, max_norm: float, group=None) -> torch.Tensor:
     """Clip this rank's shards in place by the global 2-norm over `group`; return that norm."""
-    squares = torch.zeros((), dtype=torch.float32, device=shard_grads[0].device if shard_grads else None)
+    squares = torch.zeros((), dtype=torch.float32)
     for g in shard_grads:
         squares += g.detach().float().pow(2).sum()
-    dist.all_reduce(squares, op=dist.ReduceOp.SUM, group=group)
     total_norm = squares.sqrt()
     clip_coef = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
     for g in shard_grads:
