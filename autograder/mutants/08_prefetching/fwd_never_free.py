# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: gathered units never freed
--- source/08_prefetching/08_prefetching.ipynb prefetching_forward
+++ mutant
@@ -7,5 +7,4 @@
                 handles[v] = units[v].issue_gather()
         handles[k].wait()
         x = unit.module(x)
-        unit.free()
     return x
