# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: skipping the sharding: replicated training (all-reduce every gradient, clip_grad_norm_, one optimizer over all parameters)
# caught_by: test_zero2_kept_and_sent
class Zero2Optimizer:
    """ZeRO stage 2: a rank keeps the gradient and optimizer state of its owner slice only."""

    def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.max_norm, self.group = max_norm, group
        self.optimizer = make_optimizer(self.params)

    def step(self) -> None:
        """All-reduce each gradient, clip, step every parameter on every rank."""
        with torch.no_grad():
            for p in self.params:
                dist.all_reduce(p.grad, group=self.group)
                p.grad /= dist.get_world_size(self.group)
        if self.max_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.params, self.max_norm)
        self.optimizer.step()
        self.zero_grad()

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
