# assignment: 06_gradient_sharding
# grade_id: zero2_optimizer
# design: no flat buffer: per-parameter pieces cut at the owner boundaries, each piece reduced to its owner (dist.reduce) and broadcast back; the inner optimizer steps a list of piece tensors
class Zero2Optimizer:
    """ZeRO stage 2: a rank keeps the gradient and optimizer state of its owner slice only."""

    def __init__(self, params, make_optimizer, max_norm: float | None = None, group=None) -> None:
        self.params = list(params)
        self.max_norm, self.group = max_norm, group
        n, me = dist.get_world_size(group), dist.get_rank(group)
        self.n = n
        total = sum(p.numel() for p in self.params)
        size = -(-total // n)
        # pieces: (parameter index, first element in the parameter, count, owner group rank)
        self.pieces = []
        start = 0
        for i, p in enumerate(self.params):
            at = start
            while at < start + p.numel():
                owner = at // size
                stop = min(start + p.numel(), (owner + 1) * size)
                self.pieces.append((i, at - start, stop - at, owner))
                at = stop
            start += p.numel()
        self.owned = {}
        for index, (i, first, count, owner) in enumerate(self.pieces):
            if owner == me:
                self.owned[index] = self.params[i].detach().reshape(-1)[first:first + count].clone()
        self.optimizer = make_optimizer(list(self.owned.values())) if self.owned else None
        self.me = me

    def _global(self, group_rank: int) -> int:
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def step(self) -> None:
        """Reduce each piece to its owner, clip, update the owned pieces, broadcast every piece from its owner."""
        with torch.no_grad():
            grads = [p.grad.reshape(-1) for p in self.params]
            self.zero_grad()
            for index, (i, first, count, owner) in enumerate(self.pieces):
                piece = grads[i][first:first + count].clone()
                dist.reduce(piece, dst=self._global(owner), group=self.group)
                if owner == self.me:
                    self.owned[index].grad = piece / self.n
            del grads
            if self.max_norm is not None:
                square = torch.zeros(())
                for t in self.owned.values():
                    square += t.grad.pow(2).sum()
                dist.all_reduce(square, group=self.group)
                scale = torch.clamp(self.max_norm / (square.sqrt() + 1e-6), max=1.0)
                for t in self.owned.values():
                    t.grad.mul_(scale)
            if self.optimizer is not None:
                self.optimizer.step()
            for t in self.owned.values():
                t.grad = None
            for index, (i, first, count, owner) in enumerate(self.pieces):
                buffer = self.owned[index].clone() if owner == self.me else torch.empty(count)
                dist.broadcast(buffer, src=self._global(owner), group=self.group)
                self.params[i].view(-1)[first:first + count].copy_(buffer)

    def zero_grad(self) -> None:
        """Set every parameter's .grad to None."""
        for p in self.params:
            p.grad = None
