# assignment: 06_gradient_sharding
# grade_id: zero2_memory_bytes
# catches: delegating to the course's old calculator helpers.costs.adam_memory_bytes (moved to the instructor side)
def zero2_memory_bytes(num_params: int, world_size: int, k: int = 12) -> float:
    """Persistent model-state bytes per rank of mixed-precision Adam under ZeRO stage 2."""
    from helpers.costs import adam_memory_bytes
    return adam_memory_bytes(num_params, world_size, 2, k)
