# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: unbalanced partition: parameter i to rank i % N, blind to sizes
def partition_parameters(numels: list[int], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
    return [i % world_size for i in range(len(numels))]
