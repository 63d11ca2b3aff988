# assignment: 02_global_denominator
# grade_id: train_window
# catches: a rank without valid tokens skips forward/backward (the others block in DDP's gradient all-reduce; the next, mismatched collective aborts gloo)
--- source/02_global_denominator/02_global_denominator.ipynb train_window
+++ mutant
@@ -5,10 +5,10 @@
     optimizer.zero_grad()
     if count == 0:
         return 0
-    for k, mb in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
-        with contextlib.nullcontext() if last else ddp_model.no_sync():
-            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
-            global_token_loss(losses, mb.mask, count, world_size).backward()
+    for mb in micro_batches:
+        if mb.num_valid == 0:
+            continue
+        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
+        global_token_loss(losses, mb.mask, count, world_size).backward()
     optimizer.step()
     return count
