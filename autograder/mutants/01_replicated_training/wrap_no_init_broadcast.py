# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: no broadcast at construction: the replicas start apart, and averaging gradients never closes the gap
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -7,7 +7,6 @@
         self.module = module
         self.group = group
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
-        broadcast_parameters(module, src=self.first, group=group)
         for param in module.parameters():
             if param.requires_grad:
                 param.register_post_accumulate_grad_hook(self.average)
