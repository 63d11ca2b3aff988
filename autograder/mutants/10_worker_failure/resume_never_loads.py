# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: saves checkpoints but never loads one: a restart trains again from step 0 (it used to reproduce the first run bit for bit)
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -1,10 +1,7 @@
 def train_resumable(model: nn.Module, optimizer: torch.optim.Optimizer, stream, directory: str,
                     num_steps: int, every: int) -> int:
     """Resume from the latest committed checkpoint in ``directory``; train to ``num_steps``; checkpoint every ``every``."""
-    meta = load_checkpoint(directory, model, optimizer)
-    step = 0 if meta is None else meta["step"]
-    if meta is not None:
-        stream.load_state_dict(meta["cursor"])
+    step = 0
     world_size, rank = dist.get_world_size(), dist.get_rank()
     while step < num_steps:
         x, y = stream.next_batch()
