# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: S = numel // N + 1 in place of ceil(numel / N) (one slot too many when numel is a multiple of N)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb reduce_scatter_gradients
+++ mutant
@@ -1,7 +1,7 @@
 def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
     """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
     world_size = dist.get_world_size(group)
-    shard = -(-flat_grad.numel() // world_size)
+    shard = flat_grad.numel() // world_size + 1
     padded = flat_grad.new_zeros(world_size * shard)
     padded[: flat_grad.numel()] = flat_grad
     owned = flat_grad.new_empty(shard)
