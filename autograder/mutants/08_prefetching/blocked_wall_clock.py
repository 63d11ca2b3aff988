# assignment: 08_prefetching
# grade_id: blocked_waiting_s
# catches: wall time from the first issue to the last wait, compute included
# caught_by: test_blocked_waiting_s
def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    return max(t for event, unit, t in trace if event == "wait_return") - min(t for event, unit, t in trace if event == "issue_call")
