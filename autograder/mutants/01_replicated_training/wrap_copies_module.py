# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: wrapping a deep copy of the module: the caller's module is never synchronised or trained
# caught_by: test_replicated_construction
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -1,9 +1,13 @@
+import copy
+
+
 class ReplicatedModel(nn.Module):
     """DistributedDataParallel's contract over `group`: replicas agree at construction, every forward starts
     from the group's first rank's buffers, and backward leaves the group-mean gradient in every .grad."""
 
     def __init__(self, module: nn.Module, group=None) -> None:
         super().__init__()
+        module = copy.deepcopy(module)
         self.module = module
         self.group = group
         self.first = 0 if group is None else dist.get_global_rank(group, 0)
