# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: averaging a scalar (the loss-like gradient norm) across ranks while leaving every .grad rank-local
--- source/01_replicated_training/01_replicated_training.ipynb average_gradients
+++ mutant
@@ -1,8 +1,9 @@
 def average_gradients(model: nn.Module, group=None) -> None:
     """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
-    n_ranks = dist.get_world_size(group)
-    for param in model.parameters():
-        if param.grad is None:
-            continue
-        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
-        param.grad.div_(n_ranks)
+    world_size = dist.get_world_size(group)
+    total = torch.zeros(())
+    for p in model.parameters():
+        if p.grad is not None:
+            total += p.grad.pow(2).sum()
+    dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
+    total /= world_size
