# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: (N-1) x bytes, a formula that agrees with 2(N-1)/N x bytes only at N=1 and N=2
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,3 @@
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    return float((world_size - 1) * num_elements * bytes_per_element)
