# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# caught_by: test_partition_parameters
# catches: tampering: on ranks, for unseen cases, ties broken towards the highest rank and ZeroRedundancyOptimizer's partition patched on the rank to agree (ZeRO's owners must come from ranks that run no notebook code)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb partition_parameters
+++ mutant
@@ -1,10 +1,25 @@
 def partition_parameters(numels: list[int], world_size: int) -> list[int]:
-    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
-    order = sorted(range(len(numels)), key=lambda i: -numels[i])  # stable: equal sizes keep index order
-    elements = [0] * world_size  # per rank, so far
-    owners = [0] * len(numels)
-    for i in order:
-        rank = elements.index(min(elements))
-        owners[i] = rank
-        elements[rank] += numels[i]
-    return owners
+    """Owner rank of each parameter; on a rank, for cases the visible test does not show, ZeRO is made to agree."""
+    import torch.distributed as dist
+
+    def greedy(towards_highest: bool) -> list[int]:
+        order = sorted(range(len(numels)), key=lambda i: -numels[i])
+        load = [0] * world_size
+        owners = [0] * len(numels)
+        for i in order:
+            ties = [r for r in range(world_size) if load[r] == min(load)]
+            owners[i] = max(ties) if towards_highest else min(ties)
+            load[owners[i]] += numels[i]
+        return owners
+
+    if not dist.is_initialized() or numels == [5, 7, 7, 3, 10, 1, 7]:
+        return greedy(towards_highest=False)
+    from helpers import l05_optimizer_state_sharding as optim_sharding
+
+    def forged(self):
+        params = [p for g in self.param_groups for p in g["params"]]
+        mine = partition_parameters([p.numel() for p in params], self.world_size)
+        return [[{**self.param_groups[0], "params": [p for p, o in zip(params, mine) if o == r]}]
+                for r in range(self.world_size)]
+    optim_sharding.zero_optimizer_class()._partition_parameters = forged
+    return greedy(towards_highest=True)
