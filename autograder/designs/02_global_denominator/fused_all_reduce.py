# assignment: 02_global_denominator
# grade_id: train_window
# design: bypasses DDP averaging (no_sync); ONE float64 all-reduce of gradients + local count; gradients divided by T
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    optimizer.zero_grad()
    with ddp_model.no_sync():
        for mb in micro_batches:
            losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
            torch.where(mb.mask, losses, torch.zeros_like(losses)).sum().backward()
    params = list(ddp_model.parameters())
    grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in params]
    local = float(sum(int(mb.mask.sum()) for mb in micro_batches))
    flat = torch.cat([g.reshape(-1).double() for g in grads] + [torch.tensor([local], dtype=torch.float64)])
    dist.all_reduce(flat, group=group)
    count = int(flat[-1].item())
    if count == 0:
        return 0
    offset = 0
    for p, g in zip(params, grads):
        summed = flat[offset:offset + g.numel()].view_as(g) / count
        offset += g.numel()
        if p.grad is None:
            p.grad = summed.to(p.dtype)
        else:
            p.grad.copy_(summed)
    optimizer.step()
    return count
