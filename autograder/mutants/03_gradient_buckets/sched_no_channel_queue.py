# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: all-reduces overlapping each other: every bucket starts when it is ready
--- source/03_gradient_buckets/03_gradient_buckets.ipynb communication_schedule
+++ mutant
@@ -4,7 +4,7 @@
     schedule, previous_finish = [], float("-inf")
     for bucket in buckets:
         ready = max(grad_ready_s[i] for i in bucket)
-        start = max(ready, previous_finish)
+        start = ready
         message = sum(param_bytes[i] for i in bucket)
         n = world_size
         duration = 0.0 if n == 1 else 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * message * beta_s_per_byte
