# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: rank 0 creates the step directory with os.makedirs without exist_ok: re-saving a step a killed attempt left behind fails
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -3,7 +3,9 @@
     """Collective: store this rank's state after ``step`` steps; committed when it returns on any rank."""
     world_size, rank = dist.get_world_size(), dist.get_rank()
     path = os.path.join(directory, f"step_{step:08d}")
-    os.makedirs(path, exist_ok=True)
+    if rank == 0:
+        os.makedirs(path)
+    dist.barrier()
     name, key, *rest = np.random.get_state()
     state = {
         "step": step, "world_size": world_size, "cursor": dict(cursor),
