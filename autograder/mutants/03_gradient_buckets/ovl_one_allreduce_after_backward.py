# assignment: 03_gradient_buckets
# grade_id: GradBuckets
# caught_by: test_grad_buckets_overlap
# catches: the hard part skipped: one all-reduce of the whole flat gradient in wait(), after backward (correct, nothing overlaps)
class GradBuckets:
    """Averages the gradients of `model` over `group` with one all-reduce after backward."""

    def __init__(self, model: nn.Module, group=None) -> None:
        self.params = list(model.parameters())
        self.group = group

    def wait(self) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        dist.all_reduce(flat, group=self.group)
        flat /= dist.get_world_size(self.group)
        offset = 0
        for p in self.params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
