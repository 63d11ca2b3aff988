# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: comparing the tensors of model.state_dict(): a difference in a buffer registered with persistent=False goes unseen
--- source/01_replicated_training/01_replicated_training.ipynb replicas_aligned
+++ mutant
@@ -2,10 +2,10 @@
     """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
     first = 0 if group is None else dist.get_global_rank(group, 0)
     ok = True
-    for t in list(model.parameters()) + list(model.buffers()):
-        theirs = t.detach().clone()
+    for t in model.state_dict().values():
+        theirs = t.clone()
         dist.broadcast(theirs, src=first, group=group)
-        ok = ok and torch.equal(theirs, t.detach())
+        ok = ok and torch.equal(theirs, t)
     flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
     dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
     return bool(flag.item())
