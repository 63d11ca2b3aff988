# assignment: 04_accumulation
# grade_id: train_window
# catches: the hand-made flat all-reduce in float64 (twice the bytes of the float32 gradient)
# caught_by: test_train_window_communication
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    scale = 1.0 if loss_scale is None else float(loss_scale)
    params = [p for p in ddp_model.parameters() if p.requires_grad]
    loss_sum = 0.0
    with ddp_model.no_sync():
        for x, y in micro_batches:
            summed = F.mse_loss(ddp_model(x), y, reduction="sum") / y.shape[1]
            (summed * scale).backward()
            loss_sum += summed.item()
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    local_bad = not all(bool(torch.isfinite(g).all()) for g in grads)
    extras = torch.tensor([sum(len(x) for x, _ in micro_batches), loss_sum, float(local_bad)])
    flat = torch.cat([g.reshape(-1) for g in grads] + [extras]).double()
    dist.all_reduce(flat, group=group)
    samples, window_loss, bad = flat[-3].item(), flat[-2].item() / flat[-3].item(), flat[-1].item() > 0
    if bad:
        optimizer.zero_grad()
        return window_loss, False
    offset = 0
    for p in params:
        p.grad = (flat[offset:offset + p.numel()].view_as(p) / (samples * scale)).float()
        offset += p.numel()
    torch.nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    optimizer.zero_grad()
    return window_loss, True
