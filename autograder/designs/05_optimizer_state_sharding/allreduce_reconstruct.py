# assignment: 05_optimizer_state_sharding
# grade_id: flat_adam
# design: unpadded all-reduce, one 2-row moment buffer, model rebuilt by all-reducing disjoint ranges
class FlatShardedAdam:
    """ZeRO stage 1 whose state is split equally over the ranks, whatever the parameter sizes."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.hyper = dict(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, wd=weight_decay, max_norm=max_norm)
        self.group = group
        n = dist.get_world_size(group)
        self.total = sum(p.numel() for p in self.params)
        size = math.ceil(self.total / n)
        lo = dist.get_rank(group) * size
        self.range = (min(lo, self.total), min(lo + size, self.total))
        # both moments in one buffer: [exp_avg | exp_avg_sq], each as long as this rank's range
        count = self.range[1] - self.range[0]
        self.buffer = torch.zeros(2, count)
        self.state = {"step": 0, "exp_avg": self.buffer[0], "exp_avg_sq": self.buffer[1]}

    def step(self) -> None:
        """All-reduce the gradient, update this rank's range, rebuild the model with a sum of disjoint ranges."""
        h, s = self.hyper, self.state
        lo, hi = self.range
        with torch.no_grad():
            grad = torch.cat([p.grad.reshape(-1) for p in self.params])
            dist.all_reduce(grad, group=self.group)
            grad /= dist.get_world_size(self.group)
            if h["max_norm"] is not None:
                norm = torch.linalg.vector_norm(grad)
                grad *= torch.clamp(h["max_norm"] / (norm + 1e-6), max=1.0)
            theta = torch.cat([p.reshape(-1) for p in self.params])[lo:hi]
            g = grad[lo:hi] + h["wd"] * theta if h["wd"] else grad[lo:hi]
            s["step"] += 1
            s["exp_avg"].mul_(h["beta1"]).add_((1 - h["beta1"]) * g)
            s["exp_avg_sq"].mul_(h["beta2"]).add_((1 - h["beta2"]) * g * g)
            m_hat = s["exp_avg"] / (1 - h["beta1"] ** s["step"])
            v_hat = s["exp_avg_sq"] / (1 - h["beta2"] ** s["step"])
            new = torch.zeros(self.total)
            new[lo:hi] = theta - h["lr"] * m_hat / (v_hat.sqrt() + h["eps"])
            dist.all_reduce(new, group=self.group)  # every element is non-zero on one rank only: an exact sum
            for p, piece in zip(self.params, new.split([p.numel() for p in self.params])):
                p.copy_(piece.view_as(p))

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
