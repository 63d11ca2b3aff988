# assignment: 01_replicated_training
# grade_id: replicated_model
# design: no autograd-engine callback: forward walks the output's autograd graph to learn which parameters backward will reach (as DDP's find_unused_parameters does), post-accumulate-grad hooks count arrivals, and the last one averages all the reached gradients in one flat all-reduce
class ReplicatedModel(nn.Module):
    """Forward walks the output's autograd graph to learn which parameters backward will reach (as DDP's
    find_unused_parameters does); their hooks count arrivals, and the last to arrive averages all of them in
    one flat all-reduce. No autograd-engine callback."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.module = module
        self.group = group
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        self.expected = []
        self.arrived = 0
        broadcast_parameters(module, src=self.first, group=group)
        for param in module.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self.arrive)

    def reached(self, output: torch.Tensor) -> list:
        """The module's parameters whose gradient-accumulation nodes the graph of `output` reaches."""
        leaves, seen, stack = [], set(), [output.grad_fn]
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            leaf = getattr(node, "variable", None)
            if leaf is not None:
                leaves.append(leaf)
            stack.extend(child for child, _ in node.next_functions)
        return [p for p in self.module.parameters() if any(p is leaf for leaf in leaves)]

    def arrive(self, param: torch.Tensor) -> None:
        self.arrived += 1
        if self.arrived < len(self.expected):
            return
        grads = [p.grad for p in self.expected]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, group=self.group)
        flat.div_(dist.get_world_size(self.group))
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()
        self.arrived = 0

    def forward(self, *args, **kwargs):
        with torch.no_grad():
            for buf in self.module.buffers():
                dist.broadcast(buf, src=self.first, group=self.group)
        out = self.module(*args, **kwargs)
        self.expected = self.reached(out) if out.requires_grad else []
        self.arrived = 0
        return out
