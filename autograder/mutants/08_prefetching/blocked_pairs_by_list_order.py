# assignment: 08_prefetching
# grade_id: blocked_waiting_s
# catches: pairing each wait_return with the last wait_call before it in the list (assumes time order)
# caught_by: test_blocked_waiting_s
--- source/08_prefetching/08_prefetching.ipynb blocked_waiting_s
+++ mutant
@@ -1,4 +1,9 @@
 def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
     """Measured exposed communication: total seconds spent inside wait()."""
-    called = {unit: t for event, unit, t in trace if event == "wait_call"}
-    return sum(t - called[unit] for event, unit, t in trace if event == "wait_return")
+    blocked, called = 0.0, None
+    for event, unit, t in trace:
+        if event == "wait_call":
+            called = t
+        elif event == "wait_return":
+            blocked += t - called
+    return blocked
