# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: timing each wait to the unit's compute_start instead of its wait_return
def exposed_communication(schedule: list[tuple[float, float, float, float]], compute_s: list[float]) -> float:
    """Seconds of the forward pass not spent computing."""
    return schedule[-1][3] - sum(compute_s)


def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    called = {unit: t for event, unit, t in trace if event == "wait_call"}
    return sum(t - called[unit] for event, unit, t in trace if event == "compute_start")
