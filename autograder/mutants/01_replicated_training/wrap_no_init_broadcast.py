# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: no broadcast at construction: the replicas start apart, and averaging gradients never closes the gap
# caught_by: test_replicated_construction
class ReplicatedModel(nn.Module):
    """DistributedDataParallel's contract over `group`: replicas agree at construction, every forward starts
    from the group's first rank's buffers, and backward leaves the group-mean gradient in every .grad."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        for param in module.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self.average)

    def average(self, param: torch.Tensor) -> None:
        """Runs inside backward, once this rank's gradient of `param` is accumulated."""
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM, group=self.group)
        param.grad.div_(dist.get_world_size(self.group))

    def forward(self, *args, **kwargs):
        with torch.no_grad():
            for buf in self.module.buffers():
                dist.broadcast(buf, src=self.first, group=self.group)
        return self.module(*args, **kwargs)
