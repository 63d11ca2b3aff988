# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: reading the bandwidth term of the chapter's alpha-beta model at 1 B/s (it now takes the bytes as input)
from helpers.plots import alpha_beta_allreduce_time


def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
    return alpha_beta_allreduce_time(num_elements, bytes_per_element, world_size, 1.0, 0.0)[1]
