# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: looking the answer up in the chapter's stored memory table (it holds only the chapter's choices)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb zero1_memory
+++ mutant
@@ -1,16 +1,13 @@
+from helpers.shared.stored import load as load_stored
+
+
 def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
     """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
-    return 4 * num_params + k * num_params / world_size
+    grid = load_stored("05_memory_explorer")
+    return sum(grid["parts"][str(num_params)][str(k)][grid["world_sizes"].index(world_size)][1])
 
 
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
+    first = load_stored("05_zero_memory")["budget"]["first_fitting_world_size"]["1"]
+    return first if num_params == 7_500_000_000 and budget_bytes == 32e9 and k == 12 else None
