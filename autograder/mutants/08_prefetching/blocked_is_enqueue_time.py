# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: CPU enqueue timing used as communication time
def exposed_communication(schedule: list[tuple[float, float, float, float]], compute_s: list[float]) -> float:
    """Seconds of the forward pass not spent computing."""
    return schedule[-1][3] - sum(compute_s)


def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    called = {unit: t for event, unit, t in trace if event == "issue_call"}
    return sum(t - called[unit] for event, unit, t in trace if event == "issue_return")
