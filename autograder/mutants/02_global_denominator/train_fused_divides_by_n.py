# assignment: 02_global_denominator
# grade_id: train_window
# catches: one fused all-reduce of the gradients and the count under no_sync, but divides by N T as if DDP had averaged (the gradient is N times too small)
# caught_by: test_train_window
--- source/02_global_denominator/02_global_denominator.ipynb train_window
+++ mutant
@@ -1,14 +1,20 @@
 def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
     """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
-    world_size = dist.get_world_size(group)
-    count = window_token_count([mb.mask for mb in micro_batches], group)
     optimizer.zero_grad()
+    with ddp_model.no_sync():
+        for mb in micro_batches:
+            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
+            torch.where(mb.mask, losses, torch.zeros_like(losses)).sum().backward()
+    params = list(ddp_model.parameters())
+    local = float(sum(int(mb.mask.sum()) for mb in micro_batches))
+    flat = torch.cat([p.grad.reshape(-1).double() for p in params] + [torch.tensor([local], dtype=torch.float64)])
+    dist.all_reduce(flat, group=group)
+    count = int(flat[-1].item())
     if count == 0:
         return 0
-    for k, mb in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
-        with contextlib.nullcontext() if last else ddp_model.no_sync():
-            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
-            global_token_loss(losses, mb.mask, count, world_size).backward()
+    offset = 0
+    for p in params:
+        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p) / (count * dist.get_world_size(group)))
+        offset += p.numel()
     optimizer.step()
     return count
