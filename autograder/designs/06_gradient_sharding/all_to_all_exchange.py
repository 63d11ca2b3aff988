# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# design: the reduce-scatter done by hand with all_to_all_single and a local sum, the norm from a float64 square sum, the model rebuilt with dist.all_gather into a list of shards; no master copy kept between steps (the owned slice is re-read from the model)
class Zero2Optimizer:
    """ZeRO stage 2: a rank keeps the gradient and optimizer state of its owner slice only."""

    def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.max_norm, self.group = max_norm, group
        self.n, self.me = dist.get_world_size(group), dist.get_rank(group)
        self.total = sum(p.numel() for p in self.params)
        self.size = -(-self.total // self.n)
        self.slice = torch.zeros(self.size)  # the tensor the inner optimizer steps; its state is keyed by it
        self.optimizer = make_optimizer([self.slice])

    def _padded(self, tensors) -> torch.Tensor:
        flat = torch.zeros(self.size * self.n)
        flat[:self.total] = torch.cat([t.reshape(-1) for t in tensors])
        return flat

    def step(self) -> None:
        """Exchange chunks all-to-all, sum them, clip, update the slice, all-gather the slices into the model."""
        with torch.no_grad():
            sent = self._padded([p.grad for p in self.params])
            self.zero_grad()
            received = torch.empty_like(sent)
            dist.all_to_all_single(received, sent, group=self.group)
            del sent
            grad = received.view(self.n, self.size).sum(0) / self.n
            del received
            if self.max_norm is not None:
                square = grad.double().pow(2).sum().float()
                dist.all_reduce(square, group=self.group)
                norm = square.sqrt()
                if norm > self.max_norm:
                    grad.mul_(self.max_norm / (norm + 1e-6))
            lo = self.me * self.size
            self.slice.copy_(self._padded(self.params)[lo:lo + self.size])
            self.slice.grad = grad
            self.optimizer.step()
            self.slice.grad = None
            shards = [torch.empty(self.size) for _ in range(self.n)]
            dist.all_gather(shards, self.slice, group=self.group)
            flat = torch.cat(shards)
            offset = 0
            for p in self.params:
                p.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
