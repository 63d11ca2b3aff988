# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: padding with the course's old helpers.grad_sharding.pad_flat (no longer in the student copy)
def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
    """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
    world_size = dist.get_world_size(group)
    padded = grad_sharding.pad_flat(flat_grad, world_size)
    owned = flat_grad.new_empty(padded.numel() // world_size)
    dist.reduce_scatter_single(owned, padded, group=group)
    return owned / (world_size if denominator is None else denominator)
