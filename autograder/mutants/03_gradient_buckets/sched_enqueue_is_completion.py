# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: treating the enqueue time of an async all-reduce as its completion time
--- source/03_gradient_buckets/03_gradient_buckets.ipynb communication_schedule
+++ mutant
@@ -8,6 +8,6 @@
         message = sum(param_bytes[i] for i in bucket)
         n = world_size
         duration = 0.0 if n == 1 else 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * message * beta_s_per_byte
-        schedule.append((ready, start, start + duration))
-        previous_finish = start + duration
+        schedule.append((ready, start, start))
+        previous_finish = start
     return schedule
