# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_measured
# catches: skips the hard part: whole parameters, largest first to the least-loaded rank (balanced, never split), so a parameter larger than P/N busts the budget
class FlatShardedAdam:
    """ZeRO stage 1 whose state is split equally over the ranks, whatever the parameter sizes."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay, self.max_norm = lr, tuple(betas), eps, weight_decay, max_norm
        self.group = group
        self.world_size, self.rank = dist.get_world_size(group), dist.get_rank(group)
        # whole parameters, largest first to the least-loaded rank: balanced, but never split
        load = [0] * self.world_size
        self.owned = []
        for i in sorted(range(len(self.params)), key=lambda i: -self.params[i].numel()):
            owner = load.index(min(load))
            load[owner] += self.params[i].numel()
            if owner == self.rank:
                self.owned.append(i)
        self.state = {i: (torch.zeros(self.params[i].numel()), torch.zeros(self.params[i].numel())) for i in self.owned}
        self.t = 0

    def step(self) -> None:
        """All-reduce the gradient, update owned parameters, rebuild the model with a sum of disjoint parts."""
        beta1, beta2 = self.betas
        with torch.no_grad():
            grad = torch.cat([p.grad.reshape(-1) for p in self.params])
            dist.all_reduce(grad, group=self.group)
            grad /= self.world_size
            if self.max_norm is not None:
                grad *= torch.clamp(self.max_norm / (grad.norm() + 1e-6), max=1.0)
            starts = [0]
            for p in self.params:
                starts.append(starts[-1] + p.numel())
            self.t += 1
            new = torch.zeros(starts[-1])
            for i in self.owned:
                theta = self.params[i].reshape(-1)
                g = grad[starts[i]:starts[i + 1]] + self.weight_decay * theta
                m, v = self.state[i]
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                denom = v.sqrt() / math.sqrt(1 - beta2 ** self.t) + self.eps
                new[starts[i]:starts[i + 1]] = theta - self.lr / (1 - beta1 ** self.t) * m / denom
            dist.all_reduce(new, group=self.group)
            for p, piece in zip(self.params, new.split([p.numel() for p in self.params])):
                p.copy_(piece.view_as(p))

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
