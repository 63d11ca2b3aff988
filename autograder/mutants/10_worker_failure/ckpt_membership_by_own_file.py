# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: a membership change detected by a missing own file only: shrinking 4 -> 3 ranks restores the old ranks' generators
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -30,7 +30,7 @@
         return None
     path = os.path.join(directory, f"step_{latest.item():08d}")
     saved_world = torch.load(os.path.join(path, "COMMITTED"), weights_only=True)["world_size"]
-    same = saved_world == dist.get_world_size()
+    same = os.path.exists(os.path.join(path, f"rank_{dist.get_rank()}.pt"))
     state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
     model.load_state_dict(state["model"])
     optimizer.load_state_dict(state["optimizer"])
