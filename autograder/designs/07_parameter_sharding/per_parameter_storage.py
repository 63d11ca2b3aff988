# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# design: no flat buffer: every parameter keeps its own storage, resized to 0 by free() and refilled by gather() from a temporary all-gather buffer; the re-gather for backward is a custom autograd Function (identity on the unit's output, returned by the forward hook) instead of a tensor hook; all_gather_into_tensor and a list reduce_scatter
class _RegatherInBackward(torch.autograd.Function):
    """Identity whose backward re-gathers the unit before autograd computes the unit's gradients."""

    @staticmethod
    def forward(ctx, output, unit):
        ctx.unit = unit
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad):
        ctx.unit.gather()
        return grad, None


class FullyShardedUnit:
    """Each parameter's own storage holds its full values only between gather() and free()."""

    def __init__(self, module: nn.Module, group=None) -> None:
        self.group = group
        self.params = list(module.parameters())
        self.world, rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        self.size = (self.numel + self.world - 1) // self.world
        flat = torch.cat([p.detach().reshape(-1) for p in self.params]
                         + [torch.zeros(self.world * self.size - self.numel)])
        self.shard = nn.Parameter(flat[rank * self.size:(rank + 1) * self.size].clone())
        module.register_forward_pre_hook(lambda m, args: self.gather())
        module.register_forward_hook(self._after_forward)
        self.free()

    def _after_forward(self, module, args, output):
        self.free()
        if output.requires_grad:
            return _RegatherInBackward.apply(output, self)
        return None

    def gather(self) -> None:
        full = torch.empty(self.world * self.size)
        dist.all_gather_into_tensor(full, self.shard.detach(), group=self.group)
        values = torch.split(full[: self.numel], [p.numel() for p in self.params])
        for p, value in zip(self.params, values):
            p.untyped_storage().resize_(p.numel() * p.element_size())
            p.data.copy_(value.view(p.shape))   # .data: autograd's saved parameter sees no in-place change

    def free(self) -> None:
        for p in self.params:
            p.untyped_storage().resize_(0)

    def reduce_gradients(self) -> None:
        flat = torch.cat([p.grad.reshape(-1) for p in self.params]
                         + [torch.zeros(self.world * self.size - self.numel)])
        out = torch.empty(self.size)
        dist.reduce_scatter(out, list(flat.chunk(self.world)), group=self.group)
        self.shard.grad = out / self.world
        for p in self.params:
            p.grad = None
# ruff: noqa: E501, F821 - a solution cell: torch, dist and nn come from the notebook's import cell
