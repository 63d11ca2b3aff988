# assignment: 05_optimizer_state_sharding
# grade_id: partition_parameters
# catches: ties broken towards the highest rank (not the contract's rule, not ZeRO's)
def partition_parameters(numels: list[int], world_size: int) -> list[int]:
    """Owner rank of each parameter: largest first, each to the least-loaded rank (ties: lowest rank)."""
    order = sorted(range(len(numels)), key=lambda i: -numels[i])  # stable: equal sizes keep index order
    load = [0] * world_size
    owners = [0] * len(numels)
    for i in order:
        rank = max(r for r in range(world_size) if load[r] == min(load))
        owners[i] = rank
        load[rank] += numels[i]
    return owners
