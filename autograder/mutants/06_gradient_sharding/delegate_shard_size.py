# assignment: 06_gradient_sharding
# grade_id: owned_range
# catches: computing S with the course's old helpers.grad_sharding.shard_size (no longer in the student copy)
def owned_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """(start, stop) of the real gradient elements rank `rank` owns; S = ceil(numel / world_size)."""
    from helpers.grad_sharding import shard_size
    s = shard_size(numel, world_size)
    return min(rank * s, numel), min((rank + 1) * s, numel)
