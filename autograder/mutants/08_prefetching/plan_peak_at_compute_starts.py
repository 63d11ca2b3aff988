# assignment: 08_prefetching
# grade_id: plan_prefetch
# catches: live bytes sampled only when units start computing (a unit computing for no time is freed at its start)
# caught_by: test_plan_prefetch_claims
--- source/08_prefetching/08_prefetching.ipynb plan_prefetch
+++ mutant
@@ -3,11 +3,9 @@
     """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
     communication (seconds), or None if no depth fits."""
     def peak(schedule):
-        # shards + full parameters on [issue, end) + activations from their start on; live bytes only rise
-        # when something is allocated, so the peak is reached at an allocation
         live = [(issue, end, b) for (issue, _, _, end), b in zip(schedule, unit_bytes)]
         live += [(start, float("inf"), b) for (_, _, start, _), b in zip(schedule, activation_bytes)]
-        return shard_bytes + max(sum(b for begin, end, b in live if begin <= t < end) for t, _, _ in live)
+        return shard_bytes + max(sum(b for begin, end, b in live if begin <= t < end) for _, _, t, _ in schedule)
 
     best = None
     for depth in range(len(gather_s)):
