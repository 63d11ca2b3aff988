# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: min_world_size ignores the 4Psi floor: returns a world size when none fits
def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
    """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
    return 4 * num_params + k * num_params / world_size


def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
    """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
    spare = max(budget_bytes - 4 * num_params, 1e-9)
    return max(1, math.ceil(k * num_params / spare))
