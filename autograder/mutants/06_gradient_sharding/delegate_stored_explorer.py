# assignment: 06_gradient_sharding
# grade_id: zero2_memory_bytes
# catches: reading the chapter explorer's stored grid (bytes per parameter at the grid's N and K) instead of deriving the formula
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_memory_bytes
+++ mutant
@@ -1,3 +1,6 @@
 def zero2_memory_bytes(num_params: int, world_size: int, k: int = 12) -> float:
     """Persistent model-state bytes per rank of mixed-precision Adam under ZeRO stage 2."""
-    return 2 * num_params + (2 + k) * num_params / world_size
+    from helpers.shared.stored import load
+    grid = load("06_explorer")
+    p, n = grid["num_params"].index(1_000_000), grid["world_sizes"].index(world_size)
+    return grid["stage_bytes"][p][grid["ks"].index(k)][2][n] / 1_000_000 * num_params
