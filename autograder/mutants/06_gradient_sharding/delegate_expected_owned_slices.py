# assignment: 06_gradient_sharding
# grade_id: reduce_scatter_gradients
# catches: gathering every rank's gradient and slicing the course's old single-process reference helpers.grad_sharding.expected_owned_slices
def reduce_scatter_gradients(flat_grad: torch.Tensor, group=None, denominator=None) -> torch.Tensor:
    """This rank's owned slice (S = ceil(numel/N) elements) of sum_q padded_q / denominator (default N)."""
    everyone = [torch.empty_like(flat_grad) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, flat_grad, group=group)
    slices = grad_sharding.expected_owned_slices(everyone, denominator)
    return slices[dist.get_rank(group)].to(flat_grad.dtype)
