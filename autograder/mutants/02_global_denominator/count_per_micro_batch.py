# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: one count all-reduce per micro-batch (ranks with different numbers of micro-batches issue different collectives)
--- source/02_global_denominator/02_global_denominator.ipynb window_token_count
+++ mutant
@@ -1,6 +1,8 @@
 def window_token_count(masks, group=None) -> int:
     """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
-    local = sum(int(m.sum()) for m in masks)
-    count = torch.tensor([local], dtype=torch.int64, device=masks[0].device if masks else None)
-    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
-    return int(count.item())
+    total = 0
+    for m in masks:
+        count = m.sum().to(torch.int64).reshape(1)
+        dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
+        total += int(count.item())
+    return total
