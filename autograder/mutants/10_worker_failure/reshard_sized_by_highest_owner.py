# assignment: 10_worker_failure
# grade_id: reshard
# catches: the result list is sized by the highest new owner, not new_world_size (a new rank that owns nothing is dropped)
--- source/10_worker_failure/10_worker_failure.ipynb reshard
+++ mutant
@@ -6,7 +6,7 @@
             if index in merged:
                 raise ValueError(f"parameter {index} has state in more than one shard")
             merged[index] = state
-    out = [{} for _ in range(new_world_size)]
+    out = [{} for _ in range(max(new_owners) + 1)]
     for index, state in sorted(merged.items()):
         out[new_owners[index]][index] = state
     return out
