# assignment: 02_global_denominator
# grade_id: train_window
# catches: a second collective per window (the window's mean loss all-reduced for logging): over the communication budget of one collective per window
# caught_by: test_train_window
--- source/02_global_denominator/02_global_denominator.ipynb train_window
+++ mutant
@@ -5,10 +5,12 @@
     optimizer.zero_grad()
     if count == 0:
         return 0
-    for k, mb in enumerate(micro_batches):
-        last = k == len(micro_batches) - 1
-        with contextlib.nullcontext() if last else ddp_model.no_sync():
-            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
-            global_token_loss(losses, mb.mask, count, world_size).backward()
+    logged = torch.zeros(1)
+    for mb in micro_batches:
+        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
+        loss = global_token_loss(losses, mb.mask, count, world_size)
+        loss.backward()
+        logged += loss.detach() / world_size
+    dist.all_reduce(logged, group=group)
     optimizer.step()
     return count
