# assignment: 04_accumulation
# grade_id: train_window
# catches: one forward and backward on the concatenated window (right numbers, but the window must not be in memory at once)
# caught_by: test_train_window_communication
--- source/04_accumulation/04_accumulation.ipynb train_window
+++ mutant
@@ -1,9 +1,9 @@
 def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
     """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
     scale = 1.0 if loss_scale is None else float(loss_scale)
-    loss_sum = torch.zeros((), dtype=torch.float64, device=micro_batches[0][0].device)
-    for k, (x, y) in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
+    loss_sum = torch.zeros((), dtype=torch.float64)
+    for k, (x, y) in enumerate([(torch.cat([x for x, _ in micro_batches]), torch.cat([y for _, y in micro_batches]))]):
+        last = True
         with contextlib.nullcontext() if last else ddp_model.no_sync():
             summed = F.mse_loss(ddp_model(x), y, reduction="sum") / y.shape[1]
             (summed * scale).backward()  # the 1/S of the objective is applied after the reduction
@@ -11,7 +11,7 @@
     grads = [p.grad for p in ddp_model.parameters() if p.grad is not None]
     local_bad = any(not torch.isfinite(g).all() for g in grads)
     window = torch.tensor([sum(len(x) for x, _ in micro_batches), loss_sum.item(), float(local_bad)],
-                          dtype=torch.float64, device=loss_sum.device)
+                          dtype=torch.float64)
     dist.all_reduce(window, group=group)  # the one small collective: samples, summed loss, overflow flags
     samples, window_loss = window[0].item(), window[1].item() / window[0].item()
     if window[2].item() > 0:
