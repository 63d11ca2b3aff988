# assignment: 04_accumulation
# grade_id: train_window
# catches: the recipe of separate collectives: the sample count before the backward passes, the loss and the overflow flag after (4 per window)
# caught_by: test_train_window_communication
--- source/04_accumulation/04_accumulation.ipynb train_window
+++ mutant
@@ -1,7 +1,9 @@
 def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
     """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
     scale = 1.0 if loss_scale is None else float(loss_scale)
-    loss_sum = torch.zeros((), dtype=torch.float64, device=micro_batches[0][0].device)
+    count = torch.tensor([sum(len(x) for x, _ in micro_batches)], dtype=torch.float64)
+    dist.all_reduce(count, group=group)
+    loss_sum = torch.zeros((), dtype=torch.float64)
     for k, (x, y) in enumerate(micro_batches):
         last = k == len(micro_batches) - 1
         with contextlib.nullcontext() if last else ddp_model.no_sync():
@@ -10,9 +12,10 @@
         loss_sum += summed.detach().double()
     grads = [p.grad for p in ddp_model.parameters() if p.grad is not None]
     local_bad = any(not torch.isfinite(g).all() for g in grads)
-    window = torch.tensor([sum(len(x) for x, _ in micro_batches), loss_sum.item(), float(local_bad)],
-                          dtype=torch.float64, device=loss_sum.device)
-    dist.all_reduce(window, group=group)  # the one small collective: samples, summed loss, overflow flags
+    window = torch.tensor([count.item(), loss_sum.item(), 0.0], dtype=torch.float64)
+    dist.all_reduce(window[1:2], group=group)
+    window[0] = count.item()
+    window[2] = float(found_inf_global(ddp_model.parameters(), group))
     samples, window_loss = window[0].item(), window[1].item() / window[0].item()
     if window[2].item() > 0:
         optimizer.zero_grad()
