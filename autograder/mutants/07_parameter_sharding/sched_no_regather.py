# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: no all-gather before backward although forward freed the unit (one all-gather per unit per step)
--- source/07_parameter_sharding/07_parameter_sharding.ipynb full_shard_schedule
+++ mutant
@@ -6,7 +6,5 @@
         if reshard_after_forward:
             events.append(("free", u))
     for u in reversed(range(num_units)):
-        if reshard_after_forward:
-            events.append(("all_gather", u))
         events += [("reduce_scatter", u), ("free", u)]
     return events
