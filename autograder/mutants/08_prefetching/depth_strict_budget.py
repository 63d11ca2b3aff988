# assignment: 08_prefetching
# grade_id: best_prefetch_depth
# catches: a peak equal to the budget treated as over it
def best_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                        activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Smallest depth that fits the budget (bytes) with the lowest exposed communication (s) of those that fit."""
    exposed = {}
    for depth in range(len(gather_s)):
        schedule = prefetch_schedule(gather_s, compute_s, depth)
        if peak_live_bytes(schedule, unit_bytes, activation_bytes, shard_bytes) < budget_bytes:
            exposed[depth] = exposed_communication(schedule, compute_s)
    if not exposed:
        return None
    lowest = min(exposed.values())
    return min(depth for depth, e in exposed.items() if e - lowest < 1e-9)
