# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: all-reduces overlapping each other: every bucket starts when it is ready
def communication_schedule(grad_ready_s: list[float], param_bytes: list[int], buckets: list[list[int]],
                           world_size: int, alpha_s: float, beta_s_per_byte: float) -> list[tuple[float, float, float]]:
    """(ready, start, finish) in seconds of each bucket's ring all-reduce, in bucket order."""
    schedule, previous_finish = [], float("-inf")
    for bucket in buckets:
        ready = max(grad_ready_s[i] for i in bucket)
        start = ready
        message = sum(param_bytes[i] for i in bucket)
        n = world_size
        duration = 0.0 if n == 1 else 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * message * beta_s_per_byte
        schedule.append((ready, start, start + duration))
        previous_finish = start + duration
    return schedule
