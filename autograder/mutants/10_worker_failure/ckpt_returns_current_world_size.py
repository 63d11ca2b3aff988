# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: load returns the current world size, not the one that wrote the checkpoint
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -41,7 +41,7 @@
         random.setstate(state["rng"]["python"])
         name, key, *rest = state["rng"]["numpy"]
         np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
-    return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}
+    return {"step": state["step"], "cursor": state["cursor"], "world_size": dist.get_world_size()}
 
 
 def _save_atomically(obj, path: str) -> None:
