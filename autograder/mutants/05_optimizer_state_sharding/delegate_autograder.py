# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: importing the instructor's partition rule from the autograder (refused by the grader; absent from a student copy)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb partition_parameters
+++ mutant
@@ -1,10 +1,6 @@
+from autograder.lessons.l05 import partition
+
+
 def partition_parameters(numels: list[int], world_size: int) -> list[int]:
     """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
-    order = sorted(range(len(numels)), key=lambda i: -numels[i])  # stable: equal sizes keep index order
-    elements = [0] * world_size  # per rank, so far
-    owners = [0] * len(numels)
-    for i in order:
-        rank = elements.index(min(elements))
-        owners[i] = rank
-        elements[rank] += numels[i]
-    return owners
+    return partition(numels, world_size)
