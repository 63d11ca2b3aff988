# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: keeping the full gradient: all-reduce the whole vector, then slice the owner part (right values, 2x the bytes)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb reduce_scatter_gradients
+++ mutant
@@ -1,10 +1,9 @@
 def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
     """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
-    world_size = dist.get_world_size(group)
+    world_size, rank = dist.get_world_size(group), dist.get_rank(group)
     shard = -(-flat_grad.numel() // world_size)
     padded = flat_grad.new_zeros(world_size * shard)
     padded[: flat_grad.numel()] = flat_grad
-    owned = flat_grad.new_empty(shard)
-    dist.reduce_scatter_single(owned, padded, op=dist.ReduceOp.SUM, group=group)
-    owned.div_(world_size if denominator is None else denominator)
-    return owned
+    dist.all_reduce(padded, group=group)
+    padded /= world_size if denominator is None else denominator
+    return padded[rank * shard:(rank + 1) * shard].clone()
