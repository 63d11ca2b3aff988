# assignment: 06_gradient_sharding
# grade_id: zero2_memory_bytes
# catches: sharding the fp16 parameters too (the stage-3 formula (4 + K) Psi / N)
--- source/06_gradient_sharding/06_gradient_sharding.ipynb zero2_memory_bytes
+++ mutant
@@ -1,3 +1,3 @@
 def zero2_memory_bytes(num_params: int, world_size: int, k: int = 12) -> float:
     """Persistent model-state bytes per rank of mixed-precision Adam under ZeRO stage 2."""
-    return 2 * num_params + (2 + k) * num_params / world_size
+    return (4 + k) * num_params / world_size
