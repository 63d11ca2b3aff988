# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: waiting on every in-flight handle before each compute: no overlap
--- source/08_prefetching/08_prefetching.ipynb prefetching_forward
+++ mutant
@@ -5,7 +5,8 @@
         for v in range(k, min(k + depth, len(units) - 1) + 1):
             if v not in handles:
                 handles[v] = units[v].issue_gather()
-        handles[k].wait()
+        for handle in handles.values():
+            handle.wait()
         x = unit.module(x)
         unit.free()
     return x
