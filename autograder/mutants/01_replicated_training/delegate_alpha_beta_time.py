# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: reading the bandwidth term of the chapter's alpha-beta model at 1 B/s (it now takes the bytes as input)
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,6 @@
+from helpers.l01_replicated_training.plots import alpha_beta_allreduce_time
+
+
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    return alpha_beta_allreduce_time(num_elements, bytes_per_element, world_size, 1.0, 0.0)[1]
