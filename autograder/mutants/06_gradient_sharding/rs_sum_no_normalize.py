# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: summing without normalizing (neither by N nor by the given denominator)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb reduce_scatter_gradients
+++ mutant
@@ -6,5 +6,4 @@
     padded[: flat_grad.numel()] = flat_grad
     owned = flat_grad.new_empty(shard)
     dist.reduce_scatter_single(owned, padded, op=dist.ReduceOp.SUM, group=group)
-    owned.div_(world_size if denominator is None else denominator)
     return owned
