# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: broadcasting from global rank 0 whatever the group (a group without rank 0 cannot)
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -6,7 +6,7 @@
         super().__init__()
         self.module = module
         self.group = group
-        self.first = 0 if group is None else dist.get_global_rank(group, 0)
+        self.first = 0
         broadcast_parameters(module, src=self.first, group=group)
         for param in module.parameters():
             if param.requires_grad:
