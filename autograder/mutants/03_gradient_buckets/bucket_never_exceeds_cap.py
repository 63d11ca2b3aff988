# assignment: 03_gradient_buckets
# grade_id: assign_buckets
# catches: closing the bucket before a parameter would overflow it (buckets never exceed the cap)
--- source/03_gradient_buckets/03_gradient_buckets.ipynb assign_buckets
+++ mutant
@@ -5,11 +5,11 @@
     cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
     result, current, size = [], [], 0
     for i in order:
+        if current and size + param_bytes[i] > cap:
+            result.append(current)
+            current, size, cap = [], 0, bucket_cap_bytes
         current.append(i)
         size += param_bytes[i]
-        if size >= cap:
-            result.append(current)
-            current, size, cap = [], 0, bucket_cap_bytes
     if current:
         result.append(current)
     return result
