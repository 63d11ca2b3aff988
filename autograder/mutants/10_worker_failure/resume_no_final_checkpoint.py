# assignment: 10_worker_failure
# grade_id: train_resumable
# catches: skips the checkpoint at num_steps itself (only steps before the end are committed)
def train_resumable(model: nn.Module, optimizer: torch.optim.Optimizer, stream, directory: str,
                    num_steps: int, every: int) -> int:
    """Resume from the latest committed checkpoint in ``directory``; train to ``num_steps``; checkpoint every ``every``."""
    meta = load_checkpoint(directory, model, optimizer)
    step = 0 if meta is None else meta["step"]
    if meta is not None:
        stream.load_state_dict(meta["cursor"])
    world_size, rank = dist.get_world_size(), dist.get_rank()
    while step < num_steps:
        x, y = stream.next_batch()
        rows = slice(rank * len(x) // world_size, (rank + 1) * len(x) // world_size)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        grads = [p.grad for p in model.parameters()]
        for grad in grads:
            dist.all_reduce(grad)
            grad.div_(world_size)
        optimizer.step()
        step += 1
        if step % every == 0 and step < num_steps:
            save_checkpoint(directory, step, model, optimizer, stream.state_dict())
    return step
