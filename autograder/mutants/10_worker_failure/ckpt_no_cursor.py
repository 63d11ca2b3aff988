# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: a checkpoint without the data cursor: the restarted stream starts from the beginning
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -6,7 +6,7 @@
     os.makedirs(path, exist_ok=True)
     name, key, *rest = np.random.get_state()
     state = {
-        "step": step, "world_size": world_size, "cursor": dict(cursor),
+        "step": step, "world_size": world_size,
         "model": model.state_dict(), "optimizer": optimizer.state_dict(),
         "scaler": None if scaler is None else scaler.state_dict(),
         "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
@@ -41,7 +41,7 @@
         random.setstate(state["rng"]["python"])
         name, key, *rest = state["rng"]["numpy"]
         np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
-    return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}
+    return {"step": state["step"], "cursor": {"epoch": 0, "index": 0}, "world_size": saved_world}
 
 
 def _save_atomically(obj, path: str) -> None:
