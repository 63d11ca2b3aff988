# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: broadcasting the buffers after forward instead of before: every rank ends each step with the first rank's statistics
# caught_by: test_replicated_training
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -18,7 +18,8 @@
         param.grad.div_(dist.get_world_size(self.group))
 
     def forward(self, *args, **kwargs):
+        out = self.module(*args, **kwargs)
         with torch.no_grad():
             for buf in self.module.buffers():
                 dist.broadcast(buf, src=self.first, group=self.group)
-        return self.module(*args, **kwargs)
+        return out
