# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: the old planner: an all-gather issued (its buffer allocated) only once the channel is free, not when unit v-d-1 is freed
def prefetch_schedule(gather_s: list[float], compute_s: list[float], depth: int) -> list[tuple[float, float, float, float]]:
    """(issue, landed, compute start, compute end) of every unit, in seconds."""
    schedule = []
    for v in range(len(gather_s)):
        previous_landed = schedule[v - 1][1] if v > 0 else 0.0
        freed = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
        issue = max(previous_landed, freed)
        landed = issue + gather_s[v]
        start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
        schedule.append((issue, landed, start, start + compute_s[v]))
    return schedule
