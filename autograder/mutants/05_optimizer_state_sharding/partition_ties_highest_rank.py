# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: ties broken towards the highest rank (not the contract's rule, not ZeRO's)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb partition_parameters
+++ mutant
@@ -1,10 +1,10 @@
 def partition_parameters(numels: list[int], world_size: int) -> list[int]:
     """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
     order = sorted(range(len(numels)), key=lambda i: -numels[i])  # stable: equal sizes keep index order
-    elements = [0] * world_size  # per rank, so far
+    load = [0] * world_size
     owners = [0] * len(numels)
     for i in order:
-        rank = elements.index(min(elements))
+        rank = max(r for r in range(world_size) if load[r] == min(load))
         owners[i] = rank
-        elements[rank] += numels[i]
+        load[rank] += numels[i]
     return owners
