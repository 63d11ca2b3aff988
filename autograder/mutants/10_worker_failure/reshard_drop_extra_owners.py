# assignment: 10_worker_failure
# grade_id: reshard
# catches: new rank r keeps old rank r's shard filtered to what it owns: state of other old ranks is dropped
def reshard_optimizer_state(shards: list, new_owners: list, new_world_size: int) -> list:
    """Regroup per-owner optimizer state from len(shards) old owners into new_world_size new ones."""
    merged = {}
    for shard in shards:
        for index, state in shard.items():
            if index in merged:
                raise ValueError(f"parameter {index} has state in more than one shard")
            merged[index] = state
    out = [{} for _ in range(new_world_size)]
    for r in range(min(len(shards), new_world_size)):
        out[r] = {i: s for i, s in shards[r].items() if new_owners[i] == r}
    return out
