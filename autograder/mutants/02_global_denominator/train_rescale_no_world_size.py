# assignment: 02_global_denominator
# grade_id: train_window
# catches: rescales the gradients after backward by 1/T, forgetting that DDP already divided the summed gradients by N
# caught_by: test_train_window
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    optimizer.zero_grad()
    for mb in micro_batches:
        losses = token_cross_entropy(ddp_model(mb.tokens), mb.targets)
        (losses * mb.mask).sum().backward()
    count = window_token_count([mb.mask for mb in micro_batches], group)
    if count == 0:
        return 0
    for p in ddp_model.parameters():
        if p.grad is not None:
            p.grad.div_(count)
    optimizer.step()
    return count
