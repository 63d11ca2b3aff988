# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: no smaller first bucket: every bucket uses the common cap
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -2,7 +2,7 @@
                    ready_order: list[int] | None = None) -> list[list[int]]:
     """DDP's buckets (lists of parameter indices, in launch order) for gradients of `param_bytes` bytes."""
     order = list(reversed(range(len(param_bytes)))) if ready_order is None else list(ready_order)
-    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
+    cap = bucket_cap_bytes
     result, current, size = [], [], 0
     for i in order:
         current.append(i)
