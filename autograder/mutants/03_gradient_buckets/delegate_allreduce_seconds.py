# assignment: 03_gradient_buckets
# grade_id: communication_schedule
# catches: pricing each all-reduce with the course's old helpers.buckets.allreduce_seconds (no longer in the student copy)
def communication_schedule(grad_ready_s: list[float], param_bytes: list[int], buckets: list[list[int]],
                           world_size: int, alpha_s: float, beta_s_per_byte: float) -> list[tuple[float, float, float]]:
    """(ready, start, finish) in seconds of each bucket's ring all-reduce, in bucket order."""
    from helpers.buckets import allreduce_seconds
    schedule, previous_finish = [], float("-inf")
    for bucket in buckets:
        ready = max(grad_ready_s[i] for i in bucket)
        start = max(ready, previous_finish)
        finish = start + allreduce_seconds(sum(param_bytes[i] for i in bucket), world_size, alpha_s, beta_s_per_byte)
        schedule.append((ready, start, finish))
        previous_finish = finish
    return schedule
