# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: reading schedules back out of the explorer's stored grid (only its synthetic units are stored)
--- source/08_prefetching/08_prefetching.ipynb prefetch_schedule
+++ mutant
@@ -1,9 +1,9 @@
+from helpers.shared.stored import load
+
+
 def prefetch_schedule(gather_s: list[float], compute_s: list[float], depth: int) -> list[tuple[float, float, float, float]]:
     """(issue, landed, compute start, compute end) of every unit, in seconds."""
-    schedule = []
-    for v in range(len(gather_s)):
-        issue = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0   # unit v-d-1 freed
-        landed = max(issue, schedule[v - 1][1] if v > 0 else 0.0) + gather_s[v]   # one channel
-        start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
-        schedule.append((issue, landed, start, start + compute_s[v]))
-    return schedule
+    for config in load("08_explorer")["configs"].values():
+        if config["gather_s"] == list(gather_s) and config["compute_s"] == list(compute_s):
+            return [tuple(row) for row in config["depths"][min(depth, len(gather_s) - 1)]["schedule"]]
+    return []
