# assignment: 10_worker_failure
# grade_id: reshard
# catches: each new rank keeps the state it had as an old owner and adds what it newly owns: state duplicated
def reshard_optimizer_state(shards: list, new_owners: list, new_world_size: int) -> list:
    """Regroup per-owner optimizer state from len(shards) old owners into new_world_size new ones."""
    merged = {}
    for shard in shards:
        for index, state in shard.items():
            if index in merged:
                raise ValueError(f"parameter {index} has state in more than one shard")
            merged[index] = state
    out = [{} for _ in range(new_world_size)]
    for index, state in sorted(merged.items()):
        out[new_owners[index]][index] = state
    for r in range(min(len(shards), new_world_size)):
        out[r].update(shards[r])
    return out
