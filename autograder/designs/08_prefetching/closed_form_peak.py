# assignment: 08_prefetching
# grade_id: plan_prefetch
# design: the peak in closed form over the forward's phases (waiting for / computing unit k), no interval sweep
def plan_prefetch(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                  activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> dict | None:
    """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
    communication (seconds), or None if no depth fits."""
    units = len(gather_s)

    def peak(schedule, depth):
        # The phases [E_(k-1), S_k) (waiting for unit k) and [S_k, E_k) (computing it) tile the forward; in both,
        # units k..k+depth hold their full parameters. Empty phases hold nothing; after the last unit only the
        # activations are left.
        phases = [sum(activation_bytes)]
        previous_end = 0.0
        for k, (_, _, start, end) in enumerate(schedule):
            gathered = sum(unit_bytes[k:min(k + depth, units - 1) + 1])
            if start > previous_end:
                phases.append(gathered + sum(activation_bytes[:k]))
            if end > start:
                phases.append(gathered + sum(activation_bytes[:k + 1]))
            previous_end = end
        return shard_bytes + max(phases)

    candidates = []
    for depth in range(units):
        schedule = prefetch_schedule(gather_s, compute_s, depth)  # noqa: F821 (exercise 1's)
        p = peak(schedule, depth)
        if p <= budget_bytes:
            candidates.append({"depth": depth, "peak_bytes": p, "exposed_s": schedule[-1][3] - sum(compute_s)})
    if not candidates:
        return None
    lowest = min(c["exposed_s"] for c in candidates)
    return next(c for c in candidates if c["exposed_s"] - lowest < 1e-9)
