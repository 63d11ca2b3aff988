# assignment: 08_prefetching
# grade_id: plan_prefetch
# catches: the closed form max over k of units k..k+d + activations 0..k, which assumes every unit computes for some time
# caught_by: test_plan_prefetch_claims
def plan_prefetch(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                  activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> dict | None:
    """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
    communication (seconds), or None if no depth fits."""
    def peak(schedule):
        return shard_bytes + max(sum(unit_bytes[k:k + depth + 1]) + sum(activation_bytes[:k + 1])
                                 for k in range(len(schedule)))

    best = None
    for depth in range(len(gather_s)):
        schedule = prefetch_schedule(gather_s, compute_s, depth)
        plan = {"depth": depth, "peak_bytes": peak(schedule), "exposed_s": schedule[-1][3] - sum(compute_s)}
        if plan["peak_bytes"] <= budget_bytes and (best is None or plan["exposed_s"] < best["exposed_s"] - 1e-9):
            best = plan
    return best
