# assignment: 08_prefetching
# grade_id: max_prefetch_depth
# catches: returning the first depth that exceeds the budget
def max_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                       activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Largest prefetch depth whose peak live memory fits the budget (None if none does)."""
    best = None
    for depth in range(len(gather_s)):
        schedule = prefetch_schedule(gather_s, compute_s, depth)
        best = depth
        if peak_live_bytes(schedule, unit_bytes, activation_bytes, shard_bytes) > budget_bytes:
            break
    return best
