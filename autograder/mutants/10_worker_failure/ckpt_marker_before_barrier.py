# assignment: 10_worker_failure
# grade_id: checkpoint
# catches: rank 0 writes the commit marker right after its own file, before the other ranks finished
--- source/10_worker_failure/10_worker_failure.ipynb checkpoint
+++ mutant
@@ -13,9 +13,9 @@
                 "numpy": (name, torch.from_numpy(key.astype(np.int64)), *rest)},
     }
     _save_atomically(state, os.path.join(path, f"rank_{rank}.pt"))
-    dist.barrier()  # every rank's file is in place
     if rank == 0:
         _save_atomically({"step": step, "world_size": world_size}, os.path.join(path, "COMMITTED"))
+    dist.barrier()
     dist.barrier()  # the step is committed when any rank returns
 
 
