# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: treating the first cap as a limit below the common cap (min of the two): a first cap larger than the common cap is ignored
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -2,14 +2,14 @@
                    ready_order: list[int] | None = None) -> list[list[int]]:
     """DDP's buckets (lists of parameter indices, in launch order) for gradients of `param_bytes` bytes."""
     order = list(reversed(range(len(param_bytes)))) if ready_order is None else list(ready_order)
-    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
+    first = bucket_cap_bytes if first_bucket_cap_bytes is None else min(first_bucket_cap_bytes, bucket_cap_bytes)
     result, current, size = [], [], 0
     for i in order:
         current.append(i)
         size += param_bytes[i]
-        if size >= cap:
+        if size >= (bucket_cap_bytes if result else first):
             result.append(current)
-            current, size, cap = [], 0, bucket_cap_bytes
+            current, size = [], 0
     if current:
         result.append(current)
     return result
