# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: greedy in registration order, not largest first (less balanced, not ZeRO's owners)
def partition_parameters(numels: list[int], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
    order = range(len(numels))
    load = [0] * world_size
    owners = [0] * len(numels)
    for i in order:
        rank = load.index(min(load))
        owners[i] = rank
        load[rank] += numels[i]
    return owners
