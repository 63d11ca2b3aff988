# assignment: 02_global_denominator
# grade_id: global_token_loss
# catches: mean of per-rank means: divides by the local count instead of the global one
--- source/02_global_denominator/02_global_denominator.ipynb global_token_loss
+++ mutant
@@ -1,5 +1,5 @@
 def global_token_loss(token_losses: torch.Tensor, mask: torch.Tensor, global_count: int,
                       world_size: int = 1) -> torch.Tensor:
     """(world_size / global_count) * sum of the valid token losses; 0 (zero gradient) if there are none."""
-    valid_sum = torch.where(mask, token_losses, token_losses.new_zeros(())).sum()
-    return valid_sum * (world_size / max(global_count, 1))
+    valid_sum = torch.where(mask, token_losses, torch.zeros((), dtype=token_losses.dtype)).sum()
+    return valid_sum / max(int(mask.sum()), 1)
