# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: missing padding when numel % N != 0: S = numel // N and the tail is dropped
--- source/06_gradient_sharding/06_gradient_sharding.ipynb reduce_scatter_gradients
+++ mutant
@@ -1,10 +1,7 @@
 def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
     """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
     world_size = dist.get_world_size(group)
-    shard = -(-flat_grad.numel() // world_size)
-    padded = flat_grad.new_zeros(world_size * shard)
-    padded[: flat_grad.numel()] = flat_grad
+    shard = flat_grad.numel() // world_size
     owned = flat_grad.new_empty(shard)
-    dist.reduce_scatter_single(owned, padded, op=dist.ReduceOp.SUM, group=group)
-    owned.div_(world_size if denominator is None else denominator)
-    return owned
+    dist.reduce_scatter_single(owned, flat_grad[: world_size * shard].contiguous(), group=group)
+    return owned / (world_size if denominator is None else denominator)
