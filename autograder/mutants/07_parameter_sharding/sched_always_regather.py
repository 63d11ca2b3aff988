# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: re-gathering in backward even when forward kept the parameters
--- source/07_parameter_sharding/07_parameter_sharding.ipynb full_shard_schedule
+++ mutant
@@ -6,7 +6,6 @@
         if reshard_after_forward:
             events.append(("free", u))
     for u in reversed(range(num_units)):
-        if reshard_after_forward:
-            events.append(("all_gather", u))
+        events.append(("all_gather", u))
         events += [("reduce_scatter", u), ("free", u)]
     return events
