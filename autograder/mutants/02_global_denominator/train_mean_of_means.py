# assignment: 02_global_denominator
# grade_id: train_window
# catches: mean of per-rank means: each rank normalises by its own window count
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    count = window_token_count([mb.mask for mb in micro_batches], group)
    optimizer.zero_grad()
    if count == 0:
        return 0
    local = sum(mb.num_valid for mb in micro_batches)
    for mb in micro_batches:
        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
        global_token_loss(losses, mb.mask, local, 1).backward()
    optimizer.step()
    return count
