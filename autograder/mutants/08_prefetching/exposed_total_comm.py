# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: all communication time counted as exposed (no overlap credited)
def exposed_communication(schedule: list[tuple[float, float, float, float]], compute_s: list[float]) -> float:
    """Seconds of the forward pass not spent computing."""
    return sum(landed - issue for issue, landed, _, _ in schedule)


def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    called = {unit: t for event, unit, t in trace if event == "wait_call"}
    return sum(t - called[unit] for event, unit, t in trace if event == "wait_return")
