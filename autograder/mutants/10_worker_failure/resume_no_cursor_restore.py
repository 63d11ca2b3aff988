# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: the loop loads the checkpoint but never moves the stream to its cursor (samples replayed)
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -3,8 +3,6 @@
     """Resume from the latest committed checkpoint in ``directory``; train to ``num_steps``; checkpoint every ``every``."""
     meta = load_checkpoint(directory, model, optimizer)
     step = 0 if meta is None else meta["step"]
-    if meta is not None:
-        stream.load_state_dict(meta["cursor"])
     world_size, rank = dist.get_world_size(), dist.get_rank()
     while step < num_steps:
         x, y = stream.next_batch()
