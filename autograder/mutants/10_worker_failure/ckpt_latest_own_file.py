# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: each rank resumes from the latest step holding its own file, ignoring the marker: ranks resume from different steps
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -1,6 +1,6 @@
 def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     cursor: dict, scaler: torch.amp.GradScaler | None = None) -> None:
-    """Collective: store this rank's state after ``step`` steps; committed when it returns on any rank."""
+    """Collective: write this rank's state of ``step``, then rank 0 commits it after a barrier."""
     world_size, rank = dist.get_world_size(), dist.get_rank()
     path = os.path.join(directory, f"step_{step:08d}")
     os.makedirs(path, exist_ok=True)
@@ -21,15 +21,13 @@
 
 def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler | None = None) -> dict | None:
-    """Collective: restore the latest committed checkpoint; {"step", "cursor", "world_size"}, or None."""
+    """Restore the latest committed checkpoint; return {"step", "cursor", "world_size"}, or None."""
     committed = [int(entry[len("step_"):]) for entry in os.listdir(directory)
-                 if entry.startswith("step_") and os.path.exists(os.path.join(directory, entry, "COMMITTED"))]
-    latest = torch.tensor([max(committed, default=-1)])
-    dist.all_reduce(latest, op=dist.ReduceOp.MAX)  # a listing may lag: the newest step any rank sees
-    if latest.item() < 0:
+                 if entry.startswith("step_") and os.path.exists(os.path.join(directory, entry, f"rank_{dist.get_rank()}.pt"))]
+    if not committed:
         return None
-    path = os.path.join(directory, f"step_{latest.item():08d}")
-    saved_world = torch.load(os.path.join(path, "COMMITTED"), weights_only=True)["world_size"]
+    path = os.path.join(directory, f"step_{max(committed):08d}")
+    saved_world = dist.get_world_size()
     same = saved_world == dist.get_world_size()
     state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
     model.load_state_dict(state["model"])
