# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: a checkpoint without the optimizer state (Adam's moments restart from zero)
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -7,7 +7,7 @@
     name, key, *rest = np.random.get_state()
     state = {
         "step": step, "world_size": world_size, "cursor": dict(cursor),
-        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
+        "model": model.state_dict(),
         "scaler": None if scaler is None else scaler.state_dict(),
         "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                 "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
@@ -33,7 +33,6 @@
     same = saved_world == dist.get_world_size()
     state = torch.load(os.path.join(path, f"rank_{dist.get_rank() if same else 0}.pt"), weights_only=True)
     model.load_state_dict(state["model"])
-    optimizer.load_state_dict(state["optimizer"])
     if scaler is not None and state["scaler"] is not None:
         scaler.load_state_dict(state["scaler"])
     if same:
