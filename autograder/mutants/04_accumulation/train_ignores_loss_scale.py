# assignment: 04_accumulation
# grade_id: train_window
# catches: ignoring loss_scale (no scaled backward: a scale too large for float32 goes unnoticed and the step is taken)
# caught_by: test_train_window_skips_together
--- source/04_accumulation/04_accumulation.ipynb train_window
+++ mutant
@@ -1,24 +1,24 @@
 def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
     """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
     scale = 1.0 if loss_scale is None else float(loss_scale)
-    loss_sum = torch.zeros((), dtype=torch.float64, device=micro_batches[0][0].device)
+    loss_sum = torch.zeros((), dtype=torch.float64)
     for k, (x, y) in enumerate(micro_batches):
         last = k == len(micro_batches) - 1
         with contextlib.nullcontext() if last else ddp_model.no_sync():
             summed = F.mse_loss(ddp_model(x), y, reduction="sum") / y.shape[1]
-            (summed * scale).backward()  # the 1/S of the objective is applied after the reduction
+            summed.backward()  # the 1/S of the objective is applied after the reduction
         loss_sum += summed.detach().double()
     grads = [p.grad for p in ddp_model.parameters() if p.grad is not None]
     local_bad = any(not torch.isfinite(g).all() for g in grads)
     window = torch.tensor([sum(len(x) for x, _ in micro_batches), loss_sum.item(), float(local_bad)],
-                          dtype=torch.float64, device=loss_sum.device)
+                          dtype=torch.float64)
     dist.all_reduce(window, group=group)  # the one small collective: samples, summed loss, overflow flags
     samples, window_loss = window[0].item(), window[1].item() / window[0].item()
     if window[2].item() > 0:
         optimizer.zero_grad()
         return window_loss, False
     for g in grads:  # DDP averaged over N ranks; the objective divides the sum by S
-        g.mul_(dist.get_world_size(group) / (samples * scale))
+        g.mul_(dist.get_world_size(group) / samples)
     torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
     optimizer.step()
     optimizer.zero_grad()
