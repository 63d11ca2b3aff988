# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: replacing parameters with new nn.Parameter objects (an optimizer built earlier keeps the old ones)
--- source/01_replicated_training/01_replicated_training.ipynb broadcast_parameters
+++ mutant
@@ -1,7 +1,9 @@
 def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
     """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
-    with torch.no_grad():
-        for param in model.parameters():
-            dist.broadcast(param.data, src=src, group=group)
-        for buf in model.buffers():
-            dist.broadcast(buf, src=src, group=group)
+    for module in model.modules():
+        for name, p in list(module.named_parameters(recurse=False)):
+            received = p.detach().clone()
+            dist.broadcast(received, src=src, group=group)
+            setattr(module, name, nn.Parameter(received, requires_grad=p.requires_grad))
+    for b in model.buffers():
+        dist.broadcast(b, src=src, group=group)
