# assignment: 04_accumulation
# grade_id: train_window
# catches: the recipe of separate collectives: the sample count before the backward passes, the loss and the overflow flag after (4 per window)
# caught_by: test_train_window_communication
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    scale = 1.0 if loss_scale is None else float(loss_scale)
    count = torch.tensor([sum(len(x) for x, _ in micro_batches)], dtype=torch.float64)
    dist.all_reduce(count, group=group)
    loss_sum = torch.zeros((), dtype=torch.float64)
    for k, (x, y) in enumerate(micro_batches):
        last = k == len(micro_batches) - 1
        with contextlib.nullcontext() if last else ddp_model.no_sync():
            summed = F.mse_loss(ddp_model(x), y, reduction="sum") / y.shape[1]
            (summed * scale).backward()  # the 1/S of the objective is applied after the reduction
        loss_sum += summed.detach().double()
    grads = [p.grad for p in ddp_model.parameters() if p.grad is not None]
    local_bad = any(not torch.isfinite(g).all() for g in grads)
    window = torch.tensor([count.item(), loss_sum.item(), 0.0], dtype=torch.float64)
    dist.all_reduce(window[1:2], group=group)
    window[0] = count.item()
    window[2] = float(found_inf_global(ddp_model.parameters(), group))
    samples, window_loss = window[0].item(), window[1].item() / window[0].item()
    if window[2].item() > 0:
        optimizer.zero_grad()
        return window_loss, False
    for g in grads:  # DDP averaged over N ranks; the objective divides the sum by S
        g.mul_(dist.get_world_size(group) / (samples * scale))
    torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return window_loss, True
