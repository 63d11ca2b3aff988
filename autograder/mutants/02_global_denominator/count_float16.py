# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: float16 counts (exact only up to 2048, overflow above 65504)
--- source/02_global_denominator/02_global_denominator.ipynb window_token_count
+++ mutant
@@ -1,6 +1,7 @@
 def window_token_count(masks, group=None) -> int:
     """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
-    local = sum(int(m.sum()) for m in masks)
-    count = torch.tensor([local], dtype=torch.int64, device=masks[0].device if masks else None)
+    count = torch.zeros(1, dtype=torch.float16)
+    for m in masks:
+        count += m.sum()
     dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
     return int(count.item())
