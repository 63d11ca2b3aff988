# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: trains in whole blocks of `every` steps and overshoots num_steps when it is not a multiple
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -6,7 +6,8 @@
     if meta is not None:
         stream.load_state_dict(meta["cursor"])
     world_size, rank = dist.get_world_size(), dist.get_rank()
-    while step < num_steps:
+    target = -(-num_steps // every) * every
+    while step < target:
         x, y = stream.next_batch()
         rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
         optimizer.zero_grad()
