# assignment: 06_gradient_sharding
# grade_id: owned_range
# catches: importing the instructor's reference from autograder.lessons.l06 (refused by the grader)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb owned_range
+++ mutant
@@ -1,4 +1 @@
-def owned_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
-    """(start, stop) of the real gradient elements rank `rank` owns; S = ceil(numel / world_size)."""
-    shard = -(-numel // world_size)
-    return min(rank * shard, numel), min((rank + 1) * shard, numel)
+from autograder.lessons.l06 import owned_range
