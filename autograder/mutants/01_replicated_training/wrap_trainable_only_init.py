# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: broadcasting only the trainable parameters (and buffers) at construction: a frozen parameter stays different on every rank
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -7,7 +7,9 @@
         self.module = module
         self.group = group
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
-        broadcast_parameters(module, src=self.first, group=group)
+        with torch.no_grad():
+            for t in [p for p in module.parameters() if p.requires_grad] + list(module.buffers()):
+                dist.broadcast(t, src=self.first, group=group)
         for param in module.parameters():
             if param.requires_grad:
                 param.register_post_accumulate_grad_hook(self.average)
