# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: bandwidth term without the ring factor 2(N-1)/N (the whole message once)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb communication_schedule
+++ mutant
@@ -7,7 +7,7 @@
         start = max(ready, previous_finish)
         message = sum(param_bytes[i] for i in bucket)
         n = world_size
-        duration = 0.0 if n == 1 else 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * message * beta_s_per_byte
+        duration = 0.0 if n == 1 else 2 * (n - 1) * alpha_s + message * beta_s_per_byte
         schedule.append((ready, start, start + duration))
         previous_finish = start + duration
     return schedule
