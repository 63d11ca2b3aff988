# assignment: 06_gradient_sharding
# grade_id: owned_range
# catches: returning the bounds in the padded vector, not clamped to the real numel
--- source/06_gradient_sharding/06_gradient_sharding.ipynb owned_range
+++ mutant
@@ -1,4 +1,4 @@
 def owned_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
     """(start, stop) of the real gradient elements rank `rank` owns; S = ceil(numel / world_size)."""
     shard = -(-numel // world_size)
-    return min(rank * shard, numel), min((rank + 1) * shard, numel)
+    return rank * shard, (rank + 1) * shard
