# assignment: 04_accumulation
# grade_id: train_window
# catches: dividing by K instead of by the window's samples (mean of per-micro-batch means / K; wrong with unequal micro-batches)
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    world_size = dist.get_world_size(group)
    scale = 1.0 if loss_scale is None else float(loss_scale)
    num_micro = len(micro_batches)
    loss_sum = torch.zeros(1, dtype=torch.float64)
    for k, (x, y) in enumerate(micro_batches):
        last = k == num_micro - 1
        with contextlib.nullcontext() if last else ddp_model.no_sync():
            loss = F.mse_loss(ddp_model(x), y) / num_micro
            (loss * scale).backward()
        loss_sum += loss.detach().double()
    dist.all_reduce(loss_sum, group=group)
    window_loss = loss_sum.item() / world_size
    if scale != 1.0:
        for p in ddp_model.parameters():
            if p.grad is not None:
                p.grad.div_(scale)
    if found_inf_global(ddp_model.parameters(), group):
        optimizer.zero_grad()
        return window_loss, False
    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return window_loss, True
