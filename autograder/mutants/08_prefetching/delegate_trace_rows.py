# assignment: 08_prefetching
# grade_id: exposed_communication
# catches: measuring through the chapter's old trace_rows plot helper (it is no longer there)
from helpers.prefetch_plots import trace_rows


def exposed_communication(schedule: list[tuple[float, float, float, float]], compute_s: list[float]) -> float:
    """Seconds of the forward pass not spent computing."""
    return schedule[-1][3] - sum(compute_s)


def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    return sum(row["blocked_s"] for row in trace_rows(trace))
