# assignment: 02_global_denominator
# grade_id: train_window
# catches: steps on a window without valid tokens (momentum still moves the parameters)
--- source/02_global_denominator/02_global_denominator.ipynb train_window
+++ mutant
@@ -3,12 +3,8 @@
     world_size = dist.get_world_size(group)
     count = window_token_count([mb.mask for mb in micro_batches], group)
     optimizer.zero_grad()
-    if count == 0:
-        return 0
-    for k, mb in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
-        with contextlib.nullcontext() if last else ddp_model.no_sync():
-            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
-            global_token_loss(losses, mb.mask, count, world_size).backward()
+    for mb in micro_batches:
+        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
+        global_token_loss(losses, mb.mask, count, world_size).backward()
     optimizer.step()
     return count
