# assignment: 02_global_denominator
# grade_id: train_window
# catches: gathering the window and stepping on helpers.denominator.global_mean_gradients (no longer on the student side)
def train_window(ddp_model: nn.Module, optimizer: torch.optim.Optimizer, micro_batches, group=None) -> int:
    """One optimizer step on the global mean over the window's valid tokens; returns the global count."""
    window = [None] * dist.get_world_size(group)
    dist.all_gather_object(window, list(micro_batches), group=group)
    count = sum(mb.num_valid for per_rank in window for mb in per_rank)
    optimizer.zero_grad()
    if count == 0:
        return 0
    grads = denominator.global_mean_gradients(ddp_model.module, window)
    for name, p in ddp_model.module.named_parameters():
        p.grad = grads[name].to(p.dtype)
    optimizer.step()
    return count
