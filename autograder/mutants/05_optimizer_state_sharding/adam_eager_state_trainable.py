# assignment: 05_optimizer_state_sharding
# grade_id: sharded_adam
# catches: state allocated in __init__ for every owned parameter that requires grad (not lazily at its first update)
class ShardedAdam:
    """Adam whose state for each parameter lives only on the rank that owns it (ZeRO stage 1)."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, group=None) -> None:
        self.params = list(params)
        self.lr, self.betas, self.eps, self.weight_decay = lr, tuple(betas), eps, weight_decay
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.owners = partition_parameters([p.numel() for p in self.params], self.world_size)
        # broadcast() and gather_object() take global ranks
        self.global_rank = [r if group is None else dist.get_global_rank(group, r) for r in range(self.world_size)]
        self.state = {p: {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                      for p, o in zip(self.params, self.owners) if o == self.rank and p.requires_grad}

    def step(self) -> None:
        """Average gradients, update owned parameters in place, broadcast every parameter from its owner."""
        beta1, beta2 = self.betas
        with torch.no_grad():
            for p, owner in zip(self.params, self.owners):
                if p.grad is None:
                    continue
                dist.all_reduce(p.grad, group=self.group)
                grad = p.grad.div_(self.world_size)
                if owner == self.rank:
                    if p not in self.state:
                        self.state[p] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
                    s = self.state[p]
                    s["step"] += 1
                    if self.weight_decay != 0:
                        grad = grad.add(p, alpha=self.weight_decay)
                    s["exp_avg"].lerp_(grad, 1 - beta1)
                    s["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    step_size = self.lr / (1 - beta1 ** s["step"])
                    denom = (s["exp_avg_sq"].sqrt() / math.sqrt(1 - beta2 ** s["step"])).add_(self.eps)
                    p.addcdiv_(s["exp_avg"], denom, value=-step_size)
            for p, owner in zip(self.params, self.owners):
                if p.grad is not None:
                    dist.broadcast(p, src=self.global_rank[owner], group=self.group)

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None

    def state_bytes(self) -> int:
        """Bytes of this rank's optimizer state: exp_avg + exp_avg_sq of the parameters it owns."""
        return sum(s["exp_avg"].nbytes + s["exp_avg_sq"].nbytes for s in self.state.values())

    def consolidated_state_dict(self) -> dict | None:
        """On group rank 0: a torch.optim.Adam-style state dict of all parameters; None elsewhere."""
        local = {i: {"step": torch.tensor(float(self.state[p]["step"])),
                     "exp_avg": self.state[p]["exp_avg"].clone(),
                     "exp_avg_sq": self.state[p]["exp_avg_sq"].clone()}
                 for i, p in enumerate(self.params) if p in self.state}
        gathered = [None] * self.world_size if self.rank == 0 else None
        dist.gather_object(local, gathered, dst=self.global_rank[0], group=self.group)
        if self.rank != 0:
            return None
        state = {i: s for part in gathered for i, s in part.items()}
        return {"state": dict(sorted(state.items())),
                "param_groups": [{"lr": self.lr, "betas": self.betas, "eps": self.eps,
                                  "weight_decay": self.weight_decay, "params": list(range(len(self.params)))}]}
