# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: closing a bucket only when its bytes exceed the cap (> instead of >=)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -7,7 +7,7 @@
     for i in order:
         current.append(i)
         size += param_bytes[i]
-        if size >= cap:
+        if size > cap:
             result.append(current)
             current, size, cap = [], 0, bucket_cap_bytes
     if current:
