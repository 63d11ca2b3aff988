# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: importing the instructor's reference from autograder.lessons.l03 (refused by the grader)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -1,15 +1 @@
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
+from autograder.lessons.l03 import assign_buckets
