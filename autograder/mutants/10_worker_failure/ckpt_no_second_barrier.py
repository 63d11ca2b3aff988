# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: no barrier after the marker: a rank returns before its step is committed
# caught_by: test_checkpoint_crashes
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -16,7 +16,6 @@
     dist.barrier()  # every rank's file is in place
     if rank == 0:
         _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
-    dist.barrier()  # the step is committed when any rank returns
 
 
 def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
