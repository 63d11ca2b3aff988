# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: a rank with zero valid tokens returns 0 without joining the count all-reduce (the other ranks hang: CollectiveTimeout)
--- source/02_global_denominator/02_global_denominator.ipynb window_token_count
+++ mutant
@@ -1,6 +1,8 @@
 def window_token_count(masks, group=None) -> int:
     """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
     local = sum(int(m.sum()) for m in masks)
-    count = torch.tensor([local], dtype=torch.int64, device=masks[0].device if masks else None)
+    if local == 0:
+        return 0
+    count = torch.tensor([local], dtype=torch.int64)
     dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
     return int(count.item())
