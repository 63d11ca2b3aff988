# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: averaging floating-point buffers over the group before forward instead of taking the first rank's (not what DDP's broadcast_buffers does)
# caught_by: test_replicated_training
class ReplicatedModel(nn.Module):
    """DistributedDataParallel's contract over `group`: replicas agree at construction, every forward starts
    from the group's first rank's buffers, and backward leaves the group-mean gradient in every .grad."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        broadcast_parameters(module, src=self.first, group=group)
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
                if buf.is_floating_point():
                    dist.all_reduce(buf, group=self.group)
                    buf.div_(dist.get_world_size(self.group))
                else:
                    dist.broadcast(buf, src=self.first, group=self.group)
        return self.module(*args, **kwargs)
