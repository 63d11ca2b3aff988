# assignment: 10_worker_failure
# grade_id: reshard
# catches: the result list is sized by the highest new owner, not new_world_size (a new rank that owns nothing is dropped)
def reshard_optimizer_state(shards: list, new_owners: list, new_world_size: int) -> list:
    """Regroup per-owner optimizer state from len(shards) old owners into new_world_size new ones."""
    merged = {}
    for shard in shards:
        for index, state in shard.items():
            if index in merged:
                raise ValueError(f"parameter {index} has state in more than one shard")
            merged[index] = state
    out = [{} for _ in range(max(new_owners) + 1)]
    for index, state in sorted(merged.items()):
        out[new_owners[index]][index] = state
    return out
