# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: issuing unit k+d+1 before freeing unit k: d + 2 units allocated at once, invisible at every computation
--- source/08_prefetching/08_prefetching.ipynb prefetching_forward
+++ mutant
@@ -1,11 +1,10 @@
 def prefetching_forward(units: list, x: torch.Tensor, depth: int) -> torch.Tensor:
     """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
-    handles = {}
+    handles = {v: units[v].issue_gather() for v in range(min(depth + 1, len(units)))}
     for k, unit in enumerate(units):
-        for v in range(k, min(k + depth, len(units) - 1) + 1):
-            if v not in handles:
-                handles[v] = units[v].issue_gather()
-        handles[k].wait()
+        handles.pop(k).wait()
         x = unit.module(x)
+        if k + depth + 1 < len(units):
+            handles[k + depth + 1] = units[k + depth + 1].issue_gather()
         unit.free()
     return x
