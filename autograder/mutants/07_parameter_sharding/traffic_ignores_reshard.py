# assignment: 07_parameter_sharding
# grade_id: fsdp_traffic_bytes
# catches: always two all-gathers, even without resharding after forward
def fsdp_traffic_bytes(num_params: int, bytes_per_param: int, world_size: int,
                       reshard_after_forward: bool = True) -> float:
    """Ring bytes one rank sends per FULL_SHARD (or SHARD_GRAD_OP) training step."""
    message = num_params * bytes_per_param
    gathers = 2
    return (gathers + 1) * (world_size - 1) / world_size * message
