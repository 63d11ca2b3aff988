# assignment: 05_optimizer_state_sharding
# grade_id: zero1_memory
# catches: reading the stage-1 line of the chapter's memory figure (it draws stored curves, it computes nothing)
def zero1_bytes_per_rank(num_params: int, world_size: int, k: int = 12) -> float:
    """Bytes per rank of fp16 params + fp16 grads (replicated) + k bytes/param of optimizer state sharded N ways."""
    fig = lesson.plot_zero_memory(num_params, [world_size], k=k)
    return float(fig.axes[0].get_lines()[1].get_ydata()[0])


def min_world_size(num_params: int, budget_bytes: float, k: int = 12) -> int | None:
    """Smallest world size N >= 1 with zero1_bytes_per_rank(num_params, N, k) <= budget_bytes, or None."""
    return next((n for n in range(1, 100_000) if zero1_bytes_per_rank(num_params, n, k) <= budget_bytes), None)
