# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: all-gathers overlapping each other instead of sharing one channel
def prefetch_schedule(gather_s: list[float], compute_s: list[float], depth: int) -> list[tuple[float, float, float, float]]:
    """(issue, landed, compute start, compute end) of every unit, in seconds."""
    schedule = []
    for v in range(len(gather_s)):
        issue = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
        landed = issue + gather_s[v]
        start = max(schedule[v - 1][3] if v > 0 else 0.0, landed)
        schedule.append((issue, landed, start, start + compute_s[v]))
    return schedule
