# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: delegating to the calculator the course used to ship (helpers.costs no longer exists in the student copy)
from helpers.costs import ring_allreduce_bytes as _calculator


def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
    return _calculator(num_elements, bytes_per_element, world_size)
