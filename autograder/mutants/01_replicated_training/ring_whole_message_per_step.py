# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: sending the whole message in each of the 2(N-1) steps: 2(N-1) x bytes
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,3 @@
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    return 2 * (world_size - 1) * num_elements * bytes_per_element
