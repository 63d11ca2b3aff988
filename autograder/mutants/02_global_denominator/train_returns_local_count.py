# assignment: 02_global_denominator
# grade_id: train_window
# catches: trains correctly but returns this rank's own count of valid tokens instead of the window's global T
# caught_by: test_train_window
--- source/02_global_denominator/02_global_denominator.ipynb train_window
+++ mutant
@@ -5,10 +5,8 @@
     optimizer.zero_grad()
     if count == 0:
         return 0
-    for k, mb in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
-        with contextlib.nullcontext() if last else ddp_model.no_sync():
-            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
-            global_token_loss(losses, mb.mask, count, world_size).backward()
+    for mb in micro_batches:
+        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
+        global_token_loss(losses, mb.mask, count, world_size).backward()
     optimizer.step()
-    return count
+    return sum(mb.num_valid for mb in micro_batches)
