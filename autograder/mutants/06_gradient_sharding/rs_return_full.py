# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: keeping the full gradient: returning the whole reduced vector instead of the owner slice
def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
    """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
    world_size = dist.get_world_size(group)
    reduced = flat_grad.clone()
    dist.all_reduce(reduced, group=group)
    return reduced / (world_size if denominator is None else denominator)
