# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: averaging floating-point buffers over the group before forward instead of taking the first rank's (not what DDP's broadcast_buffers does)
# caught_by: test_replicated_training
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -20,5 +20,9 @@
     def forward(self, *args, **kwargs):
         with torch.no_grad():
             for buf in self.module.buffers():
-                dist.broadcast(buf, src=self.first, group=self.group)
+                if buf.is_floating_point():
+                    dist.all_reduce(buf, group=self.group)
+                    buf.div_(dist.get_world_size(self.group))
+                else:
+                    dist.broadcast(buf, src=self.first, group=self.group)
         return self.module(*args, **kwargs)
