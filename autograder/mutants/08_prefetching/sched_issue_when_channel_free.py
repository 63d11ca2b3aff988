# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: the old planner: an all-gather issued (its buffer allocated) only once the channel is free, not when unit v-d-1 is freed
--- source/08_prefetching/08_prefetching.ipynb prefetch_schedule
+++ mutant
@@ -2,8 +2,10 @@
     """(issue, landed, compute start, compute end) of every unit, in seconds."""
     schedule = []
     for v in range(len(gather_s)):
-        issue = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0   # unit v-d-1 freed
-        landed = max(issue, schedule[v - 1][1] if v > 0 else 0.0) + gather_s[v]   # one channel
+        previous_landed = schedule[v - 1][1] if v > 0 else 0.0
+        freed = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
+        issue = max(previous_landed, freed)
+        landed = issue + gather_s[v]
         start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
         schedule.append((issue, landed, start, start + compute_s[v]))
     return schedule
