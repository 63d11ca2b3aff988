# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: min_world_size as ceil(K Psi / spare) with no floor of 1: returns 0 when there is nothing to shard (K = 0 or Psi = 0)
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb zero1_memory
+++ mutant
@@ -6,11 +6,11 @@
 def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
     """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
     spare = budget_bytes - 4 * num_params
-    if spare < 0 or (spare == 0 and k * num_params > 0):
+    if spare < 0:
         return None
-    n = max(1, math.ceil(k * num_params / spare)) if spare > 0 else 1
-    while zero1_bytes_per_rank(num_params, n, k) > budget_bytes:  # guard against rounding in the division
-        n += 1
-    while n > 1 and zero1_bytes_per_rank(num_params, n - 1, k) <= budget_bytes:
+    if spare == 0:
+        return 1 if k * num_params == 0 else None
+    n = math.ceil(k * num_params / spare)
+    while n > 1 and zero1_bytes_per_rank(num_params, n - 1, k) <= budget_bytes:  # rounding in the division
         n -= 1
     return n
