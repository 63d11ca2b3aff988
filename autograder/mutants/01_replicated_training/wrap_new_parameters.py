# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: replacing the module's parameters by new nn.Parameters holding the broadcast values (an optimizer built on the old ones trains tensors the module no longer uses)
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -7,7 +7,13 @@
         self.module = module
         self.group = group
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
-        broadcast_parameters(module, src=self.first, group=group)
+        for sub in module.modules():
+            for name, p in list(sub.named_parameters(recurse=False)):
+                received = p.detach().clone()
+                dist.broadcast(received, src=self.first, group=group)
+                setattr(sub, name, nn.Parameter(received, requires_grad=p.requires_grad))
+        for buf in module.buffers():
+            dist.broadcast(buf, src=self.first, group=group)
         for param in module.parameters():
             if param.requires_grad:
                 param.register_post_accumulate_grad_hook(self.average)
