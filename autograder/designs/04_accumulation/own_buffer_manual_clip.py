# assignment: 04_accumulation
# grade_id: train_window
# design: bypasses DDP (forward on ddp_model.module, torch.autograd.grad per micro-batch into its own flat float32 buffer, never .grad until the end); one all-reduce of buffer + [samples, loss]; overflow judged on the reduced sum; global-norm clip computed by hand
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    model = ddp_model.module
    params = [p for p in model.parameters() if p.requires_grad]
    numel = sum(p.numel() for p in params)
    buffer = torch.zeros(numel + 2)
    for x, y in micro_batches:
        summed = ((model(x) - y) ** 2).sum() / y.shape[1]
        scaled = summed if loss_scale is None else summed * loss_scale
        grads = torch.autograd.grad(scaled, params)
        buffer[:numel] += torch.cat([g.reshape(-1) for g in grads])
        buffer[numel] += len(x)
        buffer[numel + 1] += summed.detach()
    dist.all_reduce(buffer, group=group)
    samples = buffer[numel].item()
    window_loss = buffer[numel + 1].item() / samples
    grad = buffer[:numel].double() / samples
    if loss_scale is not None:
        grad /= loss_scale
    if not bool(torch.isfinite(grad).all()):  # an inf or nan anywhere survives the sum on every rank
        optimizer.zero_grad()
        return window_loss, False
    norm = grad.norm().item()
    grad *= min(1.0, max_norm / (norm + 1e-6))
    offset = 0
    for p in params:
        p.grad = grad[offset:offset + p.numel()].view_as(p).float()
        offset += p.numel()
    optimizer.step()
    optimizer.zero_grad()
    return window_loss, True
