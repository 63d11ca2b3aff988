# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# caught_by: test_flat_adam_measured
# catches: moments for the whole model on every rank, each rank updating everything (no saving, no gather)
class FlatShardedAdam:
    """ZeRO stage 1 whose state is split equally over the ranks, whatever the parameter sizes."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay, self.max_norm = lr, tuple(betas), eps, weight_decay, max_norm
        self.group = group
        self.world_size = dist.get_world_size(group)
        numel = sum(p.numel() for p in self.params)
        self.shard = math.ceil(numel / self.world_size)  # elements per rank; the last shard is padded with zeros
        start = dist.get_rank(group) * self.shard
        self.mine = slice(start, start + self.shard)
        self.exp_avg = torch.zeros(self.shard * self.world_size)
        self.exp_avg_sq = torch.zeros(self.shard * self.world_size)
        self.steps = 0

    def step(self) -> None:
        """Average and clip the gradient, update this rank's shard, give every rank the whole updated model."""
        beta1, beta2 = self.betas

        def padded(tensors) -> torch.Tensor:  # a new flat tensor: the tensors in order, then zeros
            flat = torch.zeros(self.shard * self.world_size)
            flat[:sum(t.numel() for t in tensors)] = torch.cat([t.reshape(-1) for t in tensors])
            return flat

        with torch.no_grad():
            grad = padded([p.grad for p in self.params])
            dist.all_reduce(grad, group=self.group)
            grad.div_(self.world_size)
            if self.max_norm is not None:
                grad.mul_(torch.clamp(self.max_norm / (grad.norm() + 1e-6), max=1.0))  # clip_grad_norm_'s rule
            g, theta = grad, padded(self.params)
            if self.weight_decay != 0:
                g = g.add(theta, alpha=self.weight_decay)
            self.steps += 1
            self.exp_avg.lerp_(g, 1 - beta1)
            self.exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            denom = (self.exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** self.steps)).add_(self.eps)
            theta.addcdiv_(self.exp_avg, denom, value=-self.lr / (1 - beta1 ** self.steps))
            full = theta  # every rank updates everything: no gather needed
            offset = 0
            for p in self.params:
                p.copy_(full[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None

