# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: broadcasting parameters only, so running statistics and integer counters stay per-rank
--- source/01_replicated_training/01_replicated_training.ipynb broadcast_parameters
+++ mutant
@@ -1,7 +1,4 @@
 def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
     """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
-    with torch.no_grad():
-        for param in model.parameters():
-            dist.broadcast(param.data, src=src, group=group)
-        for buf in model.buffers():
-            dist.broadcast(buf, src=src, group=group)
+    for p in model.parameters():
+        dist.broadcast(p.data, src=src, group=group)
