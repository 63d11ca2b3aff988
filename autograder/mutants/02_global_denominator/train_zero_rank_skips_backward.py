# assignment: 02_global_denominator
# grade_id: train_window
# catches: a rank without valid tokens skips forward/backward (the others block in DDP's gradient all-reduce; the next, mismatched collective aborts gloo)
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    world_size = dist.get_world_size(group)
    count = window_token_count([mb.mask for mb in micro_batches], group)
    optimizer.zero_grad()
    if count == 0:
        return 0
    for mb in micro_batches:
        if mb.num_valid == 0:
            continue
        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
        global_token_loss(losses, mb.mask, count, world_size).backward()
    optimizer.step()
    return count
