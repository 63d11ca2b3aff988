# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: dividing by a hard-coded 2 (the world size of the visible test) instead of dist.get_world_size(group)
--- source/01_replicated_training/01_replicated_training.ipynb average_gradients
+++ mutant
@@ -1,8 +1,6 @@
 def average_gradients(model: nn.Module, group=None) -> None:
     """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
-    n_ranks = dist.get_world_size(group)
-    for param in model.parameters():
-        if param.grad is None:
-            continue
-        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
-        param.grad.div_(n_ranks)
+    for p in model.parameters():
+        if p.grad is not None:
+            dist.all_reduce(p.grad, group=group)
+            p.grad /= 2
