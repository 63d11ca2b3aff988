# assignment: 10_worker_failure
# grade_id: reshard
# catches: each new rank keeps the state it had as an old owner and adds what it newly owns: state duplicated
--- source/10_worker_failure/10_worker_failure.ipynb reshard
+++ mutant
@@ -9,4 +9,6 @@
     out = [{} for _ in range(new_world_size)]
     for index, state in sorted(merged.items()):
         out[new_owners[index]][index] = state
+    for r in range(min(len(shards), new_world_size)):
+        out[r].update(shards[r])
     return out
