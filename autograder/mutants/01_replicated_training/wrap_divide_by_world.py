# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: summing over the group but dividing by the default group's size
# caught_by: test_replicated_gradients
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -15,7 +15,7 @@
     def average(self, param: torch.Tensor) -> None:
         """Runs inside backward, once this rank's gradient of `param` is accumulated."""
         dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.group)
-        param.grad.div_(dist.get_world_size(self.group))
+        param.grad.div_(dist.get_world_size())
 
     def forward(self, *args, **kwargs):
         with torch.no_grad():
