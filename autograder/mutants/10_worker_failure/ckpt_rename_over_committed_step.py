# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: commits by renaming a staging directory, but a step saved again (after a restart from an earlier step) cannot be renamed over the committed directory
# caught_by: test_checkpoint_commit
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -1,49 +1,56 @@
+import shutil
+
+
 def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                     cursor: dict, scaler: torch.amp.GradScaler | None = None) -> None:
-    """Collective: store this rank's state after ``step`` steps; committed when it returns on any rank."""
-    world_size, rank = dist.get_world_size(), dist.get_rank()
-    path = os.path.join(directory, f"step_{step:08d}")
-    os.makedirs(path, exist_ok=True)
-    name, key, *rest = np.random.get_state()
-    state = {
-        "step": step, "world_size": world_size, "cursor": dict(cursor),
-        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
-        "scaler": None if scaler is None else scaler.state_dict(),
-        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
-                "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
-    }
-    _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
-    dist.barrier()  # every rank's file is in place
+    """Collective: write into a staging directory; rank 0 renames it into place (the commit)."""
+    rank = dist.get_rank()
+    staging, final = _paths(directory, step)
+    os.makedirs(staging, exist_ok=True)
+    torch.save(_state(step, model, optimizer, cursor, scaler), os.path.join(staging, f"{rank}.pt"))
+    dist.barrier()  # every rank's file is complete in the staging directory
     if rank == 0:
-        _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
-    dist.barrier()  # the step is committed when any rank returns
+        os.replace(staging, final)
+    dist.barrier()
 
 
 def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler | None = None) -> dict | None:
-    """Collective: restore the latest committed checkpoint; {"step", "cursor", "world_size"}, or None."""
-    committed = [int(entry[len("step_"):]) for entry in os.listdir(directory)
-                 if entry.startswith("step_") and os.path.exists(os.path.join(directory, entry, "COMMITTED"))]
-    latest = torch.tensor([max(committed, default=-1)])
-    dist.all_reduce(latest, op=dist.ReduceOp.MAX)  # a listing may lag: the newest step any rank sees
-    if latest.item() < 0:
+    """Rank 0 picks the latest committed step and tells the others; every rank restores it."""
+    choice = torch.tensor([-1, 0])
+    if dist.get_rank() == 0:
+        steps = [int(name) for name in os.listdir(directory) if name.isdigit()]
+        if steps:
+            choice[0] = max(steps)
+            choice[1] = torch.load(os.path.join(directory, str(max(steps)), "0.pt"), weights_only=True)["world_size"]
+    dist.broadcast(choice, src=0)
+    step, saved_world = int(choice[0]), int(choice[1])
+    if step < 0:
         return None
-    path = os.path.join(directory, f"step_{latest.item():08d}")
-    saved_world = torch.load(os.path.join(path, "COMMITTED"), weights_only=True)["world_size"]
     same = saved_world == dist.get_world_size()
-    state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
+    state = torch.load(os.path.join(directory, str(step), f"{dist.get_rank() if same else 0}.pt"),
+                       weights_only=True)
     model.load_state_dict(state["model"])
     optimizer.load_state_dict(state["optimizer"])
     if scaler is not None and state["scaler"] is not None:
         scaler.load_state_dict(state["scaler"])
     if same:
-        torch.set_rng_state(state["rng"]["torch"])
-        random.setstate(state["rng"]["python"])
-        name, key, *rest = state["rng"]["numpy"]
-        np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
-    return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}
+        torch.set_rng_state(state["torch_rng"])
+        random.setstate(state["python_rng"])
+        np.random.set_state((state["numpy_rng"][0], state["numpy_rng"][1].numpy().astype(np.uint32),
+                             *state["numpy_rng"][2:]))
+    return {"step": step, "cursor": state["cursor"], "world_size": saved_world}
 
 
-def _save_atomically(obj, path: str) -> None:
-    torch.save(obj, path + ".tmp")
-    os.replace(path + ".tmp", path)
+def _paths(directory: str, step: int) -> tuple[str, str]:
+    return os.path.join(directory, f"staging-{step}"), os.path.join(directory, str(step))
+
+
+def _state(step: int, model: nn.Module, optimizer: torch.optim.Optimizer, cursor: dict,
+           scaler: torch.amp.GradScaler | None) -> dict:
+    name, key, pos, has_gauss, cached = np.random.get_state()
+    return {"step": step, "world_size": dist.get_world_size(), "cursor": dict(cursor),
+            "model": model.state_dict(), "optimizer": optimizer.state_dict(),
+            "scaler": None if scaler is None else scaler.state_dict(),
+            "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
+            "numpy_rng": (name, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached)}
