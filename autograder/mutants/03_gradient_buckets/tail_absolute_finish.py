# assignment: 03_gradient_buckets
# grade_id: communication_tail
# catches: returning the finish time itself instead of the time after backward
--- source/03_gradient_buckets/03_gradient_buckets.ipynb communication_tail
+++ mutant
@@ -2,4 +2,4 @@
                        world_size: int, alpha_s: float, beta_s_per_byte: float) -> float:
     """Seconds of communication left after the last gradient is ready."""
     schedule = communication_schedule(grad_ready_s, param_bytes, buckets, world_size, alpha_s, beta_s_per_byte)
-    return schedule[-1][2] - max(grad_ready_s)
+    return schedule[-1][2]
