# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: a bucket counted ready when its first gradient is, not its last
--- source/03_gradient_buckets/03_gradient_buckets.ipynb communication_schedule
+++ mutant
@@ -3,7 +3,7 @@
     """(ready, start, finish) in seconds of each bucket's ring all-reduce, in bucket order."""
     schedule, previous_finish = [], float("-inf")
     for bucket in buckets:
-        ready = max(grad_ready_s[i] for i in bucket)
+        ready = min(grad_ready_s[i] for i in bucket)
         start = max(ready, previous_finish)
         message = sum(param_bytes[i] for i in bucket)
         n = world_size
