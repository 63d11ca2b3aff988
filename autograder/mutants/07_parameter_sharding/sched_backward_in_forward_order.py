# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: backward visiting the units in forward order
--- source/07_parameter_sharding/07_parameter_sharding.ipynb full_shard_schedule
+++ mutant
@@ -5,7 +5,7 @@
         events.append(("all_gather", u))
         if reshard_after_forward:
             events.append(("free", u))
-    for u in reversed(range(num_units)):
+    for u in range(num_units):
         if reshard_after_forward:
             events.append(("all_gather", u))
         events += [("reduce_scatter", u), ("free", u)]
