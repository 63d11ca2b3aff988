# assignment: 01_replicated_training
# grade_id: replicated_model
# design: asynchronous all-reduces launched from post-accumulate-grad hooks as each gradient is ready (communication overlaps the rest of backward), all waited for and divided in one callback queued on the autograd engine for the end of backward; no call to the Exercise 1-3 functions
class ReplicatedModel(nn.Module):
    """Asynchronous all-reduces launched from hooks as each gradient is accumulated, all waited for in a
    callback queued on the autograd engine for the end of backward (communication overlaps backward)."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        self.pending = []
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=self.first, group=group)
        for param in module.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self.launch)

    def launch(self, param: torch.Tensor) -> None:
        """Start summing this gradient over the group; the first launch of a backward queues `finish`."""
        if not self.pending:
            torch.autograd.Variable._execution_engine.queue_callback(self.finish)
        self.pending.append((param.grad, dist.all_reduce(param.grad, group=self.group, async_op=True)))

    def finish(self) -> None:
        n_ranks = dist.get_world_size(self.group)
        for grad, work in self.pending:
            work.wait()
            grad.div_(n_ranks)
        self.pending.clear()

    def forward(self, *args, **kwargs):
        with torch.no_grad():
            for buf in self.module.buffers():
                dist.broadcast(buf, src=self.first, group=self.group)
        return self.module(*args, **kwargs)
