# assignment: 04_accumulation
# grade_id: window_allreduce_cost
# catches: the ring formula taken from helpers.accumulation's old import of helpers.costs (no longer on the student side)
def window_allreduce_cost(num_params: int, bytes_per_element: int, world_size: int, micro_batches: int, *,
                          no_sync: bool, num_buckets: int = 1) -> tuple[int, float]:
    """(gradient all-reduces, ring bytes sent per rank) for one accumulation window."""
    syncs = 1 if no_sync else micro_batches
    return syncs * num_buckets, syncs * acc.ring_allreduce_bytes(num_params, bytes_per_element, world_size)
