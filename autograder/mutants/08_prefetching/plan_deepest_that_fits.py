# assignment: 08_prefetching
# grade_id: plan_prefetch
# catches: the deepest depth that fits, only an upper bound: deeper than the lowest exposed communication needs
# caught_by: test_plan_prefetch_choice
--- source/08_prefetching/08_prefetching.ipynb plan_prefetch
+++ mutant
@@ -3,8 +3,6 @@
     """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
     communication (seconds), or None if no depth fits."""
     def peak(schedule):
-        # shards + full parameters on [issue, end) + activations from their start on; live bytes only rise
-        # when something is allocated, so the peak is reached at an allocation
         live = [(issue, end, b) for (issue, _, _, end), b in zip(schedule, unit_bytes)]
         live += [(start, float("inf"), b) for (_, _, start, _), b in zip(schedule, activation_bytes)]
         return shard_bytes + max(sum(b for begin, end, b in live if begin <= t < end) for t, _, _ in live)
@@ -13,6 +11,6 @@
     for depth in range(len(gather_s)):
         schedule = prefetch_schedule(gather_s, compute_s, depth)
         plan = {"depth": depth, "peak_bytes": peak(schedule), "exposed_s": schedule[-1][3] - sum(compute_s)}
-        if plan["peak_bytes"] <= budget_bytes and (best is None or plan["exposed_s"] < best["exposed_s"] - 1e-9):
+        if plan["peak_bytes"] <= budget_bytes and (best is None or plan["exposed_s"] <= best["exposed_s"] + 1e-9):
             best = plan
     return best
