# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: wrapping PyTorch's own DistributedDataParallel instead of designing the wrapper (it passes every equality, but its C++ reducer issues no collective the ledger records)
# caught_by: test_replicated_training
--- source/01_replicated_training/01_replicated_training.ipynb replicated_model
+++ mutant
@@ -1,24 +1,13 @@
+from torch.nn.parallel import DistributedDataParallel
+
+
 class ReplicatedModel(nn.Module):
-    """DistributedDataParallel's contract over `group`: replicas agree at construction, every forward starts
-    from the group's first rank's buffers, and backward leaves the group-mean gradient in every .grad."""
+    """DistributedDataParallel's contract over `group`, by DistributedDataParallel."""
 
     def __init__(self, module: nn.Module, group=None) -> None:
         super().__init__()
+        self.ddp = DistributedDataParallel(module, process_group=group, find_unused_parameters=True)
         self.module = module
-        self.group = group
-        self.first = 0 if group is None else dist.get_global_rank(group, 0)
-        broadcast_parameters(module, src=self.first, group=group)
-        for param in module.parameters():
-            if param.requires_grad:
-                param.register_post_accumulate_grad_hook(self.average)
-
-    def average(self, param: torch.Tensor) -> None:
-        """Runs inside backward, once this rank's gradient of `param` is accumulated."""
-        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.group)
-        param.grad.div_(dist.get_world_size(self.group))
 
     def forward(self, *args, **kwargs):
-        with torch.no_grad():
-            for buf in self.module.buffers():
-                dist.broadcast(buf, src=self.first, group=self.group)
-        return self.module(*args, **kwargs)
+        return self.ddp(*args, **kwargs)
