# assignment: 10_worker_failure
# grade_id: reshard
# catches: new rank r keeps old rank r's shard filtered to what it owns: state of other old ranks is dropped
--- source/10_worker_failure/10_worker_failure.ipynb reshard
+++ mutant
@@ -7,6 +7,6 @@
                 raise ValueError(f"parameter {index} has state in more than one shard")
             merged[index] = state
     out = [{} for _ in range(new_world_size)]
-    for index, state in sorted(merged.items()):
-        out[new_owners[index]][index] = state
+    for r in range(min(len(shards), new_world_size)):
+        out[r] = {i: s for i, s in shards[r].items() if new_owners[i] == r}
     return out
