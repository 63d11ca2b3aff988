# assignment: 08_prefetching
# grade_id: prefetch_schedule
# catches: computing a unit before its all-gather has landed (enqueue taken as completion)
def prefetch_schedule(gather_s: list[float], compute_s: list[float], depth: int) -> list[tuple[float, float, float, float]]:
    """(issue, landed, compute start, compute end) of every unit, in seconds."""
    schedule = []
    for v in range(len(gather_s)):
        previous_landed = schedule[v - 1][1] if v > 0 else 0.0
        issue = schedule[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
        landed = max(issue, previous_landed) + gather_s[v]
        start = max(schedule[v - 1][3] if v > 0 else 0.0, issue)
        schedule.append((issue, landed, start, start + compute_s[v]))
    return schedule
