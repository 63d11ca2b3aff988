# assignment: 02_global_denominator
# grade_id: train_window
# catches: a second collective per window (the window's mean loss all-reduced for logging): over the communication budget of one collective per window
# caught_by: test_train_window
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    world_size = dist.get_world_size(group)
    count = window_token_count([mb.mask for mb in micro_batches], group)
    optimizer.zero_grad()
    if count == 0:
        return 0
    logged = torch.zeros(1)
    for mb in micro_batches:
        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
        loss = global_token_loss(losses, mb.mask, count, world_size)
        loss.backward()
        logged += loss.detach() / world_size
    dist.all_reduce(logged, group=group)
    optimizer.step()
    return count
