# assignment: 01_replicated_training
# grade_id: ring_allreduce_bytes
# catches: importing the instructor's calculator from the autograder (refused by the grader; absent from a student copy)
from autograder.lessons.l01 import ring_allreduce_bytes as _reference


def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce of num_elements * bytes_per_element bytes."""
    return _reference(num_elements, bytes_per_element, world_size)
