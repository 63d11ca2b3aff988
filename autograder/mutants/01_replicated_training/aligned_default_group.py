# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: comparing on the default group whatever `group` says
--- source/01_replicated_training/01_replicated_training.ipynb replicas_aligned
+++ mutant
@@ -1,11 +1,10 @@
 def replicas_aligned(model: nn.Module, group=None) -> bool:
     """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
-    first = 0 if group is None else dist.get_global_rank(group, 0)
     ok = True
     for t in list(model.parameters()) + list(model.buffers()):
         theirs = t.detach().clone()
-        dist.broadcast(theirs, src=first, group=group)
+        dist.broadcast(theirs, src=0)
         ok = ok and torch.equal(theirs, t.detach())
     flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
-    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
+    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
     return bool(flag.item())
