# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: giving every trainable parameter a zero gradient before backward (so that every rank reduces every parameter): one that forward never uses ends with zeros instead of grad None
# caught_by: test_replicated_gradients
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -18,6 +18,9 @@
         param.grad.div_(dist.get_world_size(self.group))
 
     def forward(self, *args, **kwargs):
+        for param in self.module.parameters():
+            if param.requires_grad and param.grad is None:
+                param.grad = torch.zeros_like(param)
         with torch.no_grad():
             for buf in self.module.buffers():
                 dist.broadcast(buf, src=self.first, group=self.group)
