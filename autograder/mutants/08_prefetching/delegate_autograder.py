# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: importing the instructor's reference (the grader refuses the cell)
--- source/08_prefetching/08_prefetching.ipynb prefetch_schedule
+++ mutant
@@ -1,9 +1 @@
-def prefetch_schedule(gather_s: list[float], compute_s: list[float], depth: int) -> list[tuple[float, float, float, float]]:
-    """(issue, landed, compute start, compute end) of every unit, in seconds."""
-    schedule = []
-    for v in range(len(gather_s)):
-        issue = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0   # unit v-d-1 freed
-        landed = max(issue, schedule[v - 1][1] if v > 0 else 0.0) + gather_s[v]   # one channel
-        start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
-        schedule.append((issue, landed, start, start + compute_s[v]))
-    return schedule
+from autograder.lessons.l08 import prefetch_schedule
