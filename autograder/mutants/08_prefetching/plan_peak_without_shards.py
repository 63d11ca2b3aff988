# assignment: 08_prefetching
# grade_id: plan_prefetch
# catches: the shards left out of the peak
# caught_by: test_plan_prefetch_claims
def plan_prefetch(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                  activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> dict | None:
    """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
    communication (seconds), or None if no depth fits."""
    def peak(schedule):
        live = [(issue, end, b) for (issue, _, _, end), b in zip(schedule, unit_bytes)]
        live += [(start, float("inf"), b) for (_, _, start, _), b in zip(schedule, activation_bytes)]
        return max(sum(b for begin, end, b in live if begin <= t < end) for t, _, _ in live)

    best = None
    for depth in range(len(gather_s)):
        schedule = prefetch_schedule(gather_s, compute_s, depth)
        plan = {"depth": depth, "peak_bytes": peak(schedule), "exposed_s": schedule[-1][3] - sum(compute_s)}
        if plan["peak_bytes"] <= budget_bytes and (best is None or plan["exposed_s"] < best["exposed_s"] - 1e-9):
            best = plan
    return best
