# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: each rank writes a temporary file before the barrier but renames it into place after it: the marker can precede a rank's file
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -12,8 +12,10 @@
         "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                 "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
     }
-    _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
-    dist.barrier()  # every rank's file is in place
+    final = os.path.join(path, f"rank_{rank}.pt")
+    torch.save(state, final + ".tmp")
+    dist.barrier()
+    os.replace(final + ".tmp", final)
     if rank == 0:
         _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
     dist.barrier()  # the step is committed when any rank returns
