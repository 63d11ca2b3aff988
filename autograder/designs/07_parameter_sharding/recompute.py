# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# design: saves no parameters for backward: the module's forward is replaced by a custom autograd Function that gathers, runs the module without a graph and frees; its backward gathers again, recomputes the forward with a graph, back-propagates through it and frees at once, so every unit is freed as soon as its backward ends
class _GatherAndRecompute(torch.autograd.Function):
    """forward: gather, compute without a graph, free. backward: gather, recompute with a graph, backward, free."""

    @staticmethod
    def forward(ctx, x, shard, unit):
        ctx.unit = unit
        ctx.save_for_backward(x)
        unit.gather()
        with torch.no_grad():
            out = unit.inner_forward(x)
        unit.free()
        return out

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        unit = ctx.unit
        unit.gather()
        with torch.enable_grad():
            x_again = x.detach().requires_grad_(x.requires_grad)
            out = unit.inner_forward(x_again)
            torch.autograd.backward(out, grad)
        unit.free()
        return (x_again.grad if x.requires_grad else None), None, None


class FullyShardedUnit:
    """A flat buffer viewed by the parameters; the module's forward goes through _GatherAndRecompute."""

    def __init__(self, module: nn.Module, group=None) -> None:
        self.group = group
        self.params = list(module.parameters())
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        size = -(-self.numel // world)
        self.full = torch.zeros(world * size)
        self.full[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = nn.Parameter(self.full[rank * size:(rank + 1) * size].clone())
        offset = 0
        for p in self.params:
            p.data = self.full[offset:offset + p.numel()].view(p.shape)
            offset += p.numel()
        self.inner_forward = module.forward
        module.forward = lambda x: _GatherAndRecompute.apply(x, self.shard, self)
        self.free()

    def gather(self) -> None:
        storage = self.full.untyped_storage()
        storage.resize_(self.full.numel() * self.full.element_size())
        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)

    def free(self) -> None:
        self.full.untyped_storage().resize_(0)

    def reduce_gradients(self) -> None:
        world = dist.get_world_size(self.group)
        flat = torch.zeros(self.full.numel())
        flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        out = torch.empty(self.shard.numel())
        dist.reduce_scatter_single(out, flat, group=self.group)
        self.shard.grad = out / world
        for p in self.params:
            p.grad = None
# ruff: noqa: E501, F821 - a solution cell: torch, dist and nn come from the notebook's import cell
