# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: broadcasting only the trainable parameters: a frozen parameter stays different on every rank
--- source/01_replicated_training/01_replicated_training.ipynb broadcast_parameters
+++ mutant
@@ -2,6 +2,7 @@
     """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
     with torch.no_grad():
         for param in model.parameters():
-            dist.broadcast(param.data, src=src, group=group)
+            if param.requires_grad:
+                dist.broadcast(param.data, src=src, group=group)
         for buf in model.buffers():
             dist.broadcast(buf, src=src, group=group)
