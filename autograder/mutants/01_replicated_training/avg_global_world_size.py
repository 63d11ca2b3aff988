# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: summing over `group` but dividing by the default group's size
--- source/01_replicated_training/01_replicated_training.ipynb average_gradients
+++ mutant
@@ -1,8 +1,6 @@
 def average_gradients(model: nn.Module, group=None) -> None:
     """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
-    n_ranks = dist.get_world_size(group)
     for param in model.parameters():
-        if param.grad is None:
-            continue
-        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
-        param.grad.div_(n_ranks)
+        if param.grad is not None:
+            dist.all_reduce(param.grad, group=group)
+            param.grad.div_(dist.get_world_size())
