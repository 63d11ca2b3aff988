# assignment: 04_accumulation
# grade_id: found_inf_global
# catches: a non-finite gradient sum taken as an overflow (large finite gradients overflow the sum)
--- source/04_accumulation/04_accumulation.ipynb found_inf_global
+++ mutant
@@ -1,6 +1,6 @@
 def found_inf_global(parameters, group=None) -> bool:
     """True on every rank of `group` iff some rank has a non-finite element in some .grad."""
-    local = any(p.grad is not None and not torch.isfinite(p.grad).all() for p in parameters)
+    local = any(p.grad is not None and not torch.isfinite(p.grad.sum()) for p in parameters)
     flag = torch.tensor([1 if local else 0], dtype=torch.int32)
     dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
     return bool(flag.item())
