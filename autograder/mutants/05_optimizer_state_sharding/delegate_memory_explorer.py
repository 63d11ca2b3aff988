# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: asking the chapter's memory explorer (it only knows its stored choices of model size, K and N)
def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
    """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
    box = lesson.memory_explorer(num_params=num_params, k=k, world_size=world_size)
    return box.last_result["bytes_per_stage"][1]


def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
    """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024):
        if zero1_bytes_per_rank(num_params, n, k) <= budget_bytes:
            return n
    return None
