# assignment: 08_prefetching
# grade_id: blocked_waiting_s
# catches: wall time from the first issue to the last wait, compute included
# caught_by: test_blocked_waiting_s
--- source/08_prefetching/08_prefetching.ipynb blocked_waiting_s
+++ mutant
@@ -1,4 +1,3 @@
 def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
     """Measured exposed communication: total seconds spent inside wait()."""
-    called = {unit: t for event, unit, t in trace if event == "wait_call"}
-    return sum(t - called[unit] for event, unit, t in trace if event == "wait_return")
+    return max(t for event, unit, t in trace if event == "wait_return") - min(t for event, unit, t in trace if event == "issue_call")
