# assignment: 02_global_denominator
# grade_id: train_window
# design: sums of valid token losses backpropagated first; T from one count all-reduce after backward; gradients rescaled by N/T
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    optimizer.zero_grad()
    for mb in micro_batches:
        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
        (losses * mb.mask).sum().backward()
    total = torch.tensor([sum(mb.num_valid for mb in micro_batches)], dtype=torch.int64)
    dist.all_reduce(total, group=group)
    count = int(total.item())
    if count == 0:
        return 0
    scale = dist.get_world_size(group) / count
    for p in ddp_model.parameters():
        if p.grad is not None:
            p.grad.mul_(scale)
    optimizer.step()
    return count
