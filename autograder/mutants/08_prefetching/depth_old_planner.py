# assignment: 08_prefetching
# grade_id: best_prefetch_depth
# catches: the old planner inside best_prefetch_depth: buffers counted from when the channel is free, so too deep a depth fits
def best_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                        activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Smallest depth that fits the budget (bytes) with the lowest exposed communication (s) of those that fit."""
    exposed = {}
    for depth in range(len(gather_s)):
        schedule = []
        for v in range(len(gather_s)):
            previous_landed = schedule[v - 1][1] if v > 0 else 0.0
            freed = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
            issue = max(previous_landed, freed)
            landed = issue + gather_s[v]
            start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
            schedule.append((issue, landed, start, start + compute_s[v]))
        if peak_live_bytes(schedule, unit_bytes, activation_bytes, shard_bytes) <= budget_bytes:
            exposed[depth] = exposed_communication(schedule, compute_s)
    if not exposed:
        return None
    lowest = min(exposed.values())
    return min(depth for depth, e in exposed.items() if e - lowest < 1e-9)
