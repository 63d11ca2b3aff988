# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: importing the instructor's partition rule from the autograder (refused by the grader; absent from a student copy)
from autograder.lessons.l05 import partition


def partition_parameters(numels: list[int], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
    return partition(numels, world_size)
