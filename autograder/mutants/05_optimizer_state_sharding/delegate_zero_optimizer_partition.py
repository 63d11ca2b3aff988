# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: reading ZeroRedundancyOptimizer's partition (as the chapter does) instead of computing it: needs a group of that size
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb partition_parameters
+++ mutant
@@ -1,10 +1,10 @@
 def partition_parameters(numels: list[int], world_size: int) -> list[int]:
     """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
-    order = sorted(range(len(numels)), key=lambda i: -numels[i])  # stable: equal sizes keep index order
-    elements = [0] * world_size  # per rank, so far
+    params = [nn.Parameter(torch.zeros(n)) for n in numels]
+    zero = lesson.zero_optimizer_class()(params, optimizer_class=torch.optim.SGD, lr=0.1)
     owners = [0] * len(numels)
-    for i in order:
-        rank = elements.index(min(elements))
-        owners[i] = rank
-        elements[rank] += numels[i]
+    for rank, groups in enumerate(zero._partition_parameters()):
+        for group in groups:
+            for p in group["params"]:
+                owners[next(i for i, q in enumerate(params) if q is p)] = rank
     return owners
