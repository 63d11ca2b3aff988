# assignment: 08_prefetching
# grade_id: best_prefetch_depth
# catches: the first depth that exceeds the budget counted among the depths that fit
def best_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                        activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Smallest depth that fits the budget (bytes) with the lowest exposed communication (s) of those that fit."""
    exposed = {}
    for depth in range(len(gather_s)):
        schedule = prefetch_schedule(gather_s, compute_s, depth)
        exposed[depth] = exposed_communication(schedule, compute_s)
        if peak_live_bytes(schedule, unit_bytes, activation_bytes, shard_bytes) > budget_bytes:
            break
    lowest = min(exposed.values())
    return min(depth for depth, e in exposed.items() if e - lowest < 1e-9)
