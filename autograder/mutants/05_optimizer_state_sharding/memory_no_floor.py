# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: min_world_size ignores the 4Psi floor: returns a world size when none fits
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb zero1_memory
+++ mutant
@@ -5,12 +5,5 @@
 
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
+    spare = max(budget_bytes - 4 * num_params, 1e-9)
+    return max(1, math.ceil(k * num_params / spare))
