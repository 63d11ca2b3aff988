# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: asking the chapter's explorer widget (it only knows its stored slider positions)
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,7 @@
+from helpers.l01_replicated_training.plots import allreduce_explorer
+
+
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    box = allreduce_explorer(world_size=world_size, num_params=num_elements, bytes_per_element=bytes_per_element)
+    return box.last_result["bytes_per_rank"]
