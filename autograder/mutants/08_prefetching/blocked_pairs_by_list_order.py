# assignment: 08_prefetching
# grade_id: blocked_waiting_s
# catches: pairing each wait_return with the last wait_call before it in the list (assumes time order)
# caught_by: test_blocked_waiting_s
def blocked_waiting_s(trace: list[tuple[str, int, float]]) -> float:
    """Measured exposed communication: total seconds spent inside wait()."""
    blocked, called = 0.0, None
    for event, unit, t in trace:
        if event == "wait_call":
            called = t
        elif event == "wait_return":
            blocked += t - called
    return blocked
