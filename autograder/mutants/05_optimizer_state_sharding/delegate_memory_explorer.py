# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: asking the chapter's memory explorer (it only knows its stored choices of model size, K and N)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb zero1_memory
+++ mutant
@@ -1,16 +1,12 @@
 def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
     """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
-    return 4 * num_params + k * num_params / world_size
+    box = lesson.memory_explorer(num_params=num_params, k=k, world_size=world_size)
+    return box.last_result["bytes_per_stage"][1]
 
 
 def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
     """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
-    spare = budget_bytes - 4 * num_params
-    if spare < 0 or (spare == 0 and k * num_params > 0):
-        return None
-    n = max(1, math.ceil(k * num_params / spare)) if spare > 0 else 1
-    while zero1_bytes_per_rank(num_params, n, k) > budget_bytes:  # guard against rounding in the division
-        n += 1
-    while n > 1 and zero1_bytes_per_rank(num_params, n - 1, k) <= budget_bytes:
-        n -= 1
-    return n
+    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
+        if zero1_bytes_per_rank(num_params, n, k) <= budget_bytes:
+            return n
+    return None
