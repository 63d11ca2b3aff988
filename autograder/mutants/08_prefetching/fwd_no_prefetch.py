# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: no prefetch: each unit gathered only when it is needed
--- source/08_prefetching/08_prefetching.ipynb prefetching_forward
+++ mutant
@@ -2,7 +2,7 @@
     """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
     handles = {}
     for k, unit in enumerate(units):
-        for v in range(k, min(k + depth, len(units) - 1) + 1):
+        for v in range(k, k + 1):
             if v not in handles:
                 handles[v] = units[v].issue_gather()
         handles[k].wait()
