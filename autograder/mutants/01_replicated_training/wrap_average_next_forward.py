# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: skipping the hard part: averaging the gradients at the start of the next forward instead of inside backward (after backward they are still local, and the optimizer steps with them)
# caught_by: test_replicated_gradients
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -8,9 +8,6 @@
         self.group = group
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
         broadcast_parameters(module, src=self.first, group=group)
-        for param in module.parameters():
-            if param.requires_grad:
-                param.register_post_accumulate_grad_hook(self.average)
 
     def average(self, param: torch.Tensor) -> None:
         """Runs inside backward, once this rank's gradient of `param` is accumulated."""
@@ -18,6 +15,9 @@
         param.grad.div_(dist.get_world_size(self.group))
 
     def forward(self, *args, **kwargs):
+        for param in self.module.parameters():
+            if param.grad is not None:
+                self.average(param)
         with torch.no_grad():
             for buf in self.module.buffers():
                 dist.broadcast(buf, src=self.first, group=self.group)
