# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: every collective on the default group whatever `group` says (a subgroup's members wait for the other ranks)
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -5,9 +5,9 @@
     def __init__(self, module: nn.Module, group=None) -> None:
         super().__init__()
         self.module = module
-        self.group = group
+        self.group = None
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
-        broadcast_parameters(module, src=self.first, group=group)
+        broadcast_parameters(module, src=self.first)
         for param in module.parameters():
             if param.requires_grad:
                 param.register_post_accumulate_grad_hook(self.average)
