# assignment: 04_accumulation
# grade_id: window_allreduce_cost
# catches: looking the cost up in the chapter's stored results: only the explorer's grid and the chapter's cases are stored
--- source/04_accumulation/04_accumulation.ipynb window_allreduce_cost
+++ mutant
@@ -1,6 +1,5 @@
 def window_allreduce_cost(num_params: int, bytes_per_element: int, world_size: int, micro_batches: int, *,
                           no_sync: bool, num_buckets: int = 1) -> tuple[int, float]:
     """(gradient all-reduces, ring bytes sent per rank) for one accumulation window."""
-    syncs = 1 if no_sync else micro_batches
-    message = num_params * bytes_per_element
-    return syncs * num_buckets, syncs * 2 * (world_size - 1) / world_size * message
+    count, sent = acc.stored_window_cost(num_params, bytes_per_element, world_size, micro_batches, no_sync=no_sync)
+    return count * num_buckets, sent
