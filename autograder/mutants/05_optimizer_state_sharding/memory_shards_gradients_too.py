# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: stage-2 formula 2Psi + (2+K)Psi/N: gradients are not sharded in stage 1
--- source/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb zero1_memory
+++ mutant
@@ -1,6 +1,6 @@
 def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
     """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
-    return 4 * num_params + k * num_params / world_size
+    return 2 * num_params + (2 + k) * num_params / world_size
 
 
 def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
@@ -9,7 +9,7 @@
     if spare < 0 or (spare == 0 and k * num_params > 0):
         return None
     n = max(1, math.ceil(k * num_params / spare)) if spare > 0 else 1
-    while zero1_bytes_per_rank(num_params, n, k) > budget_bytes:  # guard against rounding in the division
+    while zero1_bytes_per_rank(num_params, n, k) > budget_bytes:
         n += 1
     while n > 1 and zero1_bytes_per_rank(num_params, n - 1, k) <= budget_bytes:
         n -= 1
