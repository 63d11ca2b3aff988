# assignment: 01_replicated_training
# grade_id: replicated_model
# design: no parameter hooks: a hook on forward's output queues an autograd-engine callback that, when backward has finished, averages every existing gradient in one flat all-reduce; construction and buffers are coalesced broadcasts, one per dtype
class ReplicatedModel(nn.Module):
    """One flat all-reduce of every gradient when backward ends (an autograd callback queued by a hook on the
    output); construction and buffers in one coalesced broadcast each."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        self.broadcast_flat(list(module.parameters()) + list(module.buffers()))

    def broadcast_flat(self, tensors) -> None:
        """Broadcast `tensors` from the group's first rank in one message per dtype, in place."""
        with torch.no_grad():
            for dtype in sorted({t.dtype for t in tensors}, key=str):
                same = [t for t in tensors if t.dtype == dtype]
                flat = torch.cat([t.detach().reshape(-1) for t in same])
                dist.broadcast(flat, src=self.first, group=self.group)
                offset = 0
                for t in same:
                    t.copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()

    def forward(self, *args, **kwargs):
        self.broadcast_flat(list(self.module.buffers()))
        out = self.module(*args, **kwargs)
        if out.requires_grad:
            out.register_hook(self.queue_average)
        return out

    def queue_average(self, grad: torch.Tensor) -> torch.Tensor:
        torch.autograd.Variable._execution_engine.queue_callback(self.average_all)
        return grad

    def average_all(self) -> None:
        """Runs when backward has finished: average every existing gradient in one all-reduce."""
        grads = [p.grad for p in self.module.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=self.group)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
