# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: keeps disk use low by removing older steps before the new step is committed: a crash in between leaves nothing to resume
# caught_by: test_checkpoint_crashes
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -1,3 +1,6 @@
+import shutil
+
+
 def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     cursor: dict, scaler: torch.amp.GradScaler | None = None) -> None:
     """Collective: store this rank's state after ``step`` steps; committed when it returns on any rank."""
@@ -14,6 +17,10 @@
     }
     _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
     dist.barrier()  # every rank's file is in place
+    if rank == 0:
+        for entry in os.listdir(directory):
+            if entry.startswith("step_") and entry != os.path.basename(path):
+                shutil.rmtree(os.path.join(directory, entry))
     if rank == 0:
         _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
     dist.barrier()  # the step is committed when any rank returns
