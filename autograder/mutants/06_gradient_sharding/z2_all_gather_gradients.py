# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# catches: gathering every rank's whole gradient with a tensor all-gather and summing the owner slice locally (no all-reduce, but N - 1 gradients travel)
# caught_by: test_zero2_kept_and_sent
class Zero2Optimizer:
    """ZeRO stage 2: a rank keeps the gradient and optimizer state of its owner slice only."""

    def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.max_norm, self.group = max_norm, group
        self.world_size = dist.get_world_size(group)
        self.numel = sum(p.numel() for p in self.params)
        self.shard = math.ceil(self.numel / self.world_size)
        start, stop = owned_range(self.numel, self.world_size, dist.get_rank(group))
        # this rank's slice of the flat parameters, padded to S elements: the tensor the inner optimizer steps
        self.master = torch.zeros(self.shard)
        self.master[: stop - start] = torch.cat([p.detach().reshape(-1) for p in self.params])[start:stop]
        self.optimizer = make_optimizer([self.master])

    def step(self) -> None:
        """Reduce-scatter the gradient, clip by the global norm, update the owned slice, rebuild the model."""
        with torch.no_grad():
            flat = torch.cat([p.grad.reshape(-1) for p in self.params])
            self.zero_grad()  # the full local gradient is not kept
            rank = dist.get_rank(self.group)
            padded = torch.zeros(self.shard * self.world_size)
            padded[: flat.numel()] = flat
            everyone = torch.empty(self.world_size * padded.numel())
            dist.all_gather_into_tensor(everyone, padded, group=self.group)
            owned = everyone.view(self.world_size, -1).sum(0)[rank * self.shard:(rank + 1) * self.shard] / self.world_size
            del flat
            if self.max_norm is not None:
                sharded_clip_grad_norm_([owned], self.max_norm, self.group)
            self.master.grad = owned
            self.optimizer.step()
            self.master.grad = None
            full = torch.empty(self.shard * self.world_size)
            dist.all_gather_single(full, self.master, group=self.group)
            offset = 0
            for p in self.params:
                p.copy_(full[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
