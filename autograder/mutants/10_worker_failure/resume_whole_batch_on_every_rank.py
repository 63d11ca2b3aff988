# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: every rank trains on the whole global batch instead of its own rows (the same mean, other random draws)
--- source/10_worker_failure/10_worker_failure.ipynb train_resumable
+++ mutant
@@ -8,7 +8,7 @@
     world_size, rank = dist.get_world_size(), dist.get_rank()
     while step < num_steps:
         x, y = stream.next_batch()
-        rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
+        rows = slice(None)
         optimizer.zero_grad()
         nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
         grads = [p.grad for p in model.parameters()]
