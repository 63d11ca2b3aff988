# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: broadcasting buffers only at construction: each rank's BatchNorm statistics then evolve from its own rows only, unlike DDP's broadcast_buffers
# caught_by: test_replicated_training
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -18,7 +18,4 @@
         param.grad.div_(dist.get_world_size(self.group))
 
     def forward(self, *args, **kwargs):
-        with torch.no_grad():
-            for buf in self.module.buffers():
-                dist.broadcast(buf, src=self.first, group=self.group)
         return self.module(*args, **kwargs)
