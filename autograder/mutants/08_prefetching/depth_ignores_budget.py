# assignment: 08_prefetching
# grade_id: best_prefetch_depth
# catches: the smallest depth with the lowest exposed communication of all depths, checked against the budget only for None
def best_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                        activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Smallest depth that fits the budget (bytes) with the lowest exposed communication (s) of those that fit."""
    schedules = [prefetch_schedule(gather_s, compute_s, depth) for depth in range(len(gather_s))]
    if peak_live_bytes(schedules[0], unit_bytes, activation_bytes, shard_bytes) > budget_bytes:
        return None
    exposed = [exposed_communication(schedule, compute_s) for schedule in schedules]
    return exposed.index(min(exposed))
