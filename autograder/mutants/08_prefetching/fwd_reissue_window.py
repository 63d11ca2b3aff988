# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: re-issuing every all-gather of the window at each step (9 instead of 4 for depth 2)
--- source/08_prefetching/08_prefetching.ipynb prefetching_forward
+++ mutant
@@ -3,8 +3,7 @@
     handles = {}
     for k, unit in enumerate(units):
         for v in range(k, min(k + depth, len(units) - 1) + 1):
-            if v not in handles:
-                handles[v] = units[v].issue_gather()
+            handles[v] = units[v].issue_gather()
         handles[k].wait()
         x = unit.module(x)
         unit.free()
