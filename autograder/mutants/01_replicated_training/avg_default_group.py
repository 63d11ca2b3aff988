# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: all-reducing on the default group whatever `group` says (a subgroup's members wait for ranks outside it)
--- source/01_replicated_training/01_replicated_training.ipynb average_gradients
+++ mutant
@@ -2,7 +2,6 @@
     """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
     n_ranks = dist.get_world_size(group)
     for param in model.parameters():
-        if param.grad is None:
-            continue
-        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=group)
-        param.grad.div_(n_ranks)
+        if param.grad is not None:
+            dist.all_reduce(param.grad)
+            param.grad.div_(n_ranks)
