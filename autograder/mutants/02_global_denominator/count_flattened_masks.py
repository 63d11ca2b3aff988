# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: all-reduces the flattened masks (a collective whose shape differs between ranks)
--- source/02_global_denominator/02_global_denominator.ipynb window_token_count
+++ mutant
@@ -1,6 +1,5 @@
 def window_token_count(masks, group=None) -> int:
     """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
-    local = sum(int(m.sum()) for m in masks)
-    count = torch.tensor([local], dtype=torch.int64, device=masks[0].device if masks else None)
-    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
-    return int(count.item())
+    flat = torch.cat([m.reshape(-1) for m in masks] or [torch.zeros(0, dtype=torch.bool)]).to(torch.int64)
+    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
+    return int(flat.sum())
