# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_matches_adam
# catches: broadcast from the owner's group rank instead of its global rank: wrong or invalid src on a subgroup
class FlatShardedAdam:
    """ZeRO stage 1 whose state is split equally over the ranks, whatever the parameter sizes."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay, self.max_norm = lr, tuple(betas), eps, weight_decay, max_norm
        self.group = group
        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        total = sum(p.numel() for p in self.params)
        self.size = -(-total // self.world_size)
        self.sources = list(range(self.world_size))  # the owner's rank in the group
        self.starts = [0]
        for p in self.params:
            self.starts.append(self.starts[-1] + p.numel())
        lo = self.rank * self.size
        # per parameter that meets this rank's range: (parameter index, first element in p, in the shard, count)
        self.pieces = []
        for i, p in enumerate(self.params):
            a, b = max(self.starts[i], lo), min(self.starts[i + 1], lo + self.size)
            if a < b:
                self.pieces.append((i, a - self.starts[i], a - lo, b - a))
        self.moments = {i: (torch.zeros(n), torch.zeros(n)) for i, _, _, n in self.pieces}
        self.t = 0

    def step(self) -> None:
        """Reduce-scatter the gradient, clip by the global norm, update owned pieces, broadcast each shard."""
        beta1, beta2 = self.betas
        n = self.world_size
        with torch.no_grad():
            flat = torch.zeros(self.size * n)
            for i, p in enumerate(self.params):
                flat[self.starts[i]:self.starts[i + 1]] = p.grad.reshape(-1)
            mine = torch.empty(self.size)
            dist.reduce_scatter_tensor(mine, flat, group=self.group)
            mine.div_(n)
            if self.max_norm is not None:
                square = mine.square().sum()
                dist.all_reduce(square, group=self.group)
                mine.mul_(torch.clamp(self.max_norm / (square.sqrt() + 1e-6), max=1.0))
            self.t += 1
            bias1, bias2 = 1 - beta1 ** self.t, 1 - beta2 ** self.t
            for i, first, at, count in self.pieces:
                theta = self.params[i].view(-1)[first:first + count]
                g = mine[at:at + count]
                if self.weight_decay != 0:
                    g = g + self.weight_decay * theta
                m, v = self.moments[i]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                theta.sub_(self.lr / bias1 * m / (v.sqrt() / math.sqrt(bias2) + self.eps))
            for owner in range(n):
                shard = torch.zeros(self.size)
                if owner == self.rank:
                    for i, first, at, count in self.pieces:
                        shard[at:at + count] = self.params[i].view(-1)[first:first + count]
                dist.broadcast(shard, src=self.sources[owner], group=self.group)
                lo = owner * self.size
                for i, p in enumerate(self.params):
                    a, b = max(self.starts[i], lo), min(self.starts[i + 1], lo + self.size)
                    if a < b:
                        p.view(-1)[a - self.starts[i]:b - self.starts[i]] = shard[a - lo:b - lo]

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
