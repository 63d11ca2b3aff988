# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: the script seeds its generators at start-up after loading, overriding the restored RNG state
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -6,6 +6,9 @@
     if meta is not None:
         stream.load_state_dict(meta["cursor"])
     world_size, rank = dist.get_world_size(), dist.get_rank()
+    torch.manual_seed(1234 + rank)
+    np.random.seed(1234 + rank)
+    random.seed(1234 + rank)
     while step < num_steps:
         x, y = stream.next_batch()
         rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
