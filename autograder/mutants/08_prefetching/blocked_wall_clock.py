# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: wall time from the first issue to the last wait, compute included
def exposed_communication(schedule: list[tuple[float, float, float, float]], compute_s: list[float]) -> float:
    """Seconds of the forward pass not spent computing."""
    return schedule[-1][3] - sum(compute_s)


def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    return max(t for event, unit, t in trace if event == "wait_return") - min(t for event, unit, t in trace if event == "issue_call")
