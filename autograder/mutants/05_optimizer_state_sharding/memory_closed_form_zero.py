# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: min_world_size as ceil(K Psi / spare) with no floor of 1: returns 0 when there is nothing to shard (K = 0 or Psi = 0)
def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
    """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
    return 4 * num_params + k * num_params / world_size


def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
    """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
    spare = budget_bytes - 4 * num_params
    if spare < 0:
        return None
    if spare == 0:
        return 1 if k * num_params == 0 else None
    n = math.ceil(k * num_params / spare)
    while n > 1 and zero1_bytes_per_rank(num_params, n - 1, k) <= budget_bytes:  # rounding in the division
        n -= 1
    return n
