# assignment: 04_accumulation
# grade_id: train_window
# catches: gathering the window and copying the result of helpers.accumulation.reference_training (no longer on the student side)
def train_window(ddp_model, optimizer, micro_batches, *, max_norm, loss_scale=None, group=None):
    """One optimizer update for a window of micro-batches; returns (window_loss, step_taken)."""
    window = [None] * dist.get_world_size(group)
    dist.all_gather_object(window, list(micro_batches), group=group)
    kind = "adam" if isinstance(optimizer, torch.optim.Adam) else "sgd"
    spec = acc.OptimizerSpec(kind, {k: v for k, v in optimizer.defaults.items() if k in ("lr", "betas", "momentum")})
    result = acc.reference_training(ddp_model.module, [window], spec, max_norm)
    with torch.no_grad():
        for name, p in ddp_model.module.named_parameters():
            p.copy_(result["state"][name])
    return result["losses"][0], True
