# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: numpy's state saved without its cached Gaussian (restored as if none were cached)
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -10,7 +10,7 @@
         "model": model.state_dict(), "optimizer": optimizer.state_dict(),
         "scaler": None if scaler is None else scaler.state_dict(),
         "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
-                "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
+                "numpy": (name, torch.from_numpy(key.astype(np.int64)), rest[0])},
     }
     _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
     dist.barrier()  # every rank's file is in place
@@ -40,7 +40,7 @@
         torch.set_rng_state(state["rng"]["torch"])
         random.setstate(state["rng"]["python"])
         name, key, *rest = state["rng"]["numpy"]
-        np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
+        np.random.set_state((name, key.numpy().astype(np.uint32), *rest, 0, 0.0))
     return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}
 
 
