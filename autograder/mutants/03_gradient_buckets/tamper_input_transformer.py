# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: tampering: an IPython input transformer that blanks every later cell, tests included (the grader refuses the cell)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -1,15 +1,5 @@
-def assign_buckets(param_bytes: list[int], bucket_cap_bytes: int, first_bucket_cap_bytes: int | None = None,
-                   ready_order: list[int] | None = None) -> list[list[int]]:
-    """DDP's buckets (lists of parameter indices, in launch order) for gradients of `param_bytes` bytes."""
-    order = list(reversed(range(len(param_bytes)))) if ready_order is None else list(ready_order)
-    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
-    result, current, size = [], [], 0
-    for i in order:
-        current.append(i)
-        size += param_bytes[i]
-        if size >= cap:
-            result.append(current)
-            current, size, cap = [], 0, bucket_cap_bytes
-    if current:
-        result.append(current)
-    return result
+get_ipython().input_transformers_cleanup.append(lambda lines: [])
+
+
+def assign_buckets(param_bytes, bucket_cap_bytes, first_bucket_cap_bytes=None, ready_order=None):
+    raise NotImplementedError()
