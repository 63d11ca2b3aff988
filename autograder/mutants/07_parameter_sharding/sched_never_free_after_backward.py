# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: gathered parameters never freed after backward
--- source/07_parameter_sharding/07_parameter_sharding.ipynb full_shard_schedule
+++ mutant
@@ -8,5 +8,5 @@
     for u in reversed(range(num_units)):
         if reshard_after_forward:
             events.append(("all_gather", u))
-        events += [("reduce_scatter", u), ("free", u)]
+        events += [("reduce_scatter", u)]
     return events
