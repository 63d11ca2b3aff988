# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: broadcasting the buffers before forward from global rank 0 whatever the group
# caught_by: test_replicated_gradients
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -20,5 +20,5 @@
     def forward(self, *args, **kwargs):
         with torch.no_grad():
             for buf in self.module.buffers():
-                dist.broadcast(buf, src=self.first, group=self.group)
+                dist.broadcast(buf, src=0, group=self.group)
         return self.module(*args, **kwargs)
