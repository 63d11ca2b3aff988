# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: scaling the chapter's stored byte counts (they exist only for the world sizes the chapter shows)
--- source/01_replicated_training/01_replicated_training.ipynb ring_allreduce_bytes
+++ mutant
@@ -1,3 +1,10 @@
+from helpers.shared.stored import load as load_stored
+
+
 def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
     """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
-    return 2 * (world_size - 1) / world_size * num_elements * bytes_per_element
+    factor = {int(w): b / 1200 / 4 for w, b in load_stored("01_ring_allreduce")["tables"]["1200"].items()}
+    grid = load_stored("01_allreduce_explorer")
+    for i, w in enumerate(grid["world_sizes"]):
+        factor[w] = grid["bytes_per_rank"]["1"]["1000000"][i] / 1_000_000
+    return factor[world_size] * num_elements * bytes_per_element
