# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: a checkpoint without any random generator state
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -9,8 +9,6 @@
         "step": step, "world_size": world_size, "cursor": dict(cursor),
         "model": model.state_dict(), "optimizer": optimizer.state_dict(),
         "scaler": None if scaler is None else scaler.state_dict(),
-        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
-                "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
     }
     _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
     dist.barrier()  # every rank's file is in place
@@ -36,11 +34,6 @@
     optimizer.load_state_dict(state["optimizer"])
     if scaler is not None and state["scaler"] is not None:
         scaler.load_state_dict(state["scaler"])
-    if same:
-        torch.set_rng_state(state["rng"]["torch"])
-        random.setstate(state["rng"]["python"])
-        name, key, *rest = state["rng"]["numpy"]
-        np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
     return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}
 
 
