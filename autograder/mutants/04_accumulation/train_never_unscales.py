# assignment: 04_accumulation
# grade_id: train_window
# catches: never unscaling the gradient (passes while clipping binds: clipping hides the scale)
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    world_size = dist.get_world_size(group)
    scale = 1.0 if loss_scale is None else float(loss_scale)
    count = torch.tensor([sum(len(x) for x, _ in micro_batches)], dtype=torch.int64)
    dist.all_reduce(count, group=group)
    window_samples = int(count.item())
    loss_sum = torch.zeros(1, dtype=torch.float64)
    for k, (x, y) in enumerate(micro_batches):
        last = k == len(micro_batches) - 1
        with contextlib.nullcontext() if last else ddp_model.no_sync():
            summed = F.mse_loss(ddp_model(x), y, reduction="sum") / y.shape[1]
            (summed * (scale * world_size / window_samples)).backward()
        loss_sum += summed.detach().double()
    dist.all_reduce(loss_sum, group=group)
    window_loss = loss_sum.item() / window_samples
    if found_inf_global(ddp_model.parameters(), group):
        optimizer.zero_grad()
        return window_loss, False
    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm=max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return window_loss, True
