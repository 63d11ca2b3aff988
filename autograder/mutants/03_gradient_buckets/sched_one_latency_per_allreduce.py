# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: one alpha per all-reduce instead of 2(N-1) ring steps
def communication_schedule(grad_ready_s: list[float], param_bytes: list[int], buckets: list[list[int]],
                           world_size: int, alpha_s: float, beta_s_per_byte: float) -> list[tuple[float, float, float]]:
    """(ready, start, finish) in seconds of each bucket's ring all-reduce, in bucket order."""
    schedule, previous_finish = [], float("-inf")
    for bucket in buckets:
        ready = max(grad_ready_s[i] for i in bucket)
        start = max(ready, previous_finish)
        message = sum(param_bytes[i] for i in bucket)
        n = world_size
        duration = 0.0 if n == 1 else alpha_s + 2 * (n - 1) / n * message * beta_s_per_byte
        schedule.append((ready, start, start + duration))
        previous_finish = start + duration
    return schedule
