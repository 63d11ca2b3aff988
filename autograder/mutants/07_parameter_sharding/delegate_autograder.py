# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: importing the instructor's reference (the grader refuses the cell)
--- source/07_parameter_sharding/07_parameter_sharding.ipynb full_shard_schedule
+++ mutant
@@ -1,12 +1 @@
-def full_shard_schedule(num_units: int, reshard_after_forward: bool = True) -> list[tuple[str, int]]:
-    """(kind, unit) events of one FULL_SHARD (or SHARD_GRAD_OP) training step."""
-    events = []
-    for u in range(num_units):
-        events.append(("all_gather", u))
-        if reshard_after_forward:
-            events.append(("free", u))
-    for u in reversed(range(num_units)):
-        if reshard_after_forward:
-            events.append(("all_gather", u))
-        events += [("reduce_scatter", u), ("free", u)]
-    return events
+from autograder.lessons.l07 import full_shard_schedule
