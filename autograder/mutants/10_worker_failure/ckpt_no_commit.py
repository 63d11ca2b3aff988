# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: skips the commit: rank files renamed into place, no barrier, no marker, and a load that takes the newest step directory any rank lists: a crash leaves a step that some ranks never wrote
# caught_by: test_checkpoint_crashes
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -13,23 +13,18 @@
                 "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
     }
     _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
-    dist.barrier()  # every rank's file is in place
-    if rank == 0:
-        _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
-    dist.barrier()  # the step is committed when any rank returns
 
 
 def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                     scaler: torch.amp.GradScaler | None = None) -> dict | None:
     """Collective: restore the latest committed checkpoint; {"step", "cursor", "world_size"}, or None."""
-    committed = [int(entry[len("step_"):]) for entry in os.listdir(directory)
-                 if entry.startswith("step_") and os.path.exists(os.path.join(directory, entry, "COMMITTED"))]
+    committed = [int(entry[len("step_"):]) for entry in os.listdir(directory) if entry.startswith("step_")]
     latest = torch.tensor([max(committed, default=-1)])
     dist.all_reduce(latest, op=dist.ReduceOp.MAX)  # a listing may lag: the newest step any rank sees
     if latest.item() < 0:
         return None
     path = os.path.join(directory, f"step_{latest.item():08d}")
-    saved_world = torch.load(os.path.join(path, "COMMITTED"), weights_only=True)["world_size"]
+    saved_world = torch.load(os.path.join(path, "rank_0.pt"), weights_only=True)["world_size"]
     same = saved_world == dist.get_world_size()
     state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
     model.load_state_dict(state["model"])
