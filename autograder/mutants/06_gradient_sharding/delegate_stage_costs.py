# assignment: 06_gradient_sharding
# grade_id: zero2_memory_bytes
# catches: delegating to the course's old calculator helpers.grad_sharding.stage_costs (no longer in the student copy)
def zero2_memory_bytes(num_params: int, world_size: int, k: int = 12) -> float:
    """Persistent model-state bytes per rank of mixed-precision Adam under ZeRO stage 2."""
    return grad_sharding.stage_costs(num_params, world_size, k)["stage2_bytes"]
