# assignment: 10_worker_failure
# grade_id: train_uneven
# catches: when every rank has data, averages the ranks' own mean losses (wrong for batches of different sizes)
def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    """Train while any rank has a batch; never leave a collective to the others alone."""
    steps = 0
    while True:
        has_data = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has_data)
        if has_data.item() == 0:
            return steps
        optimizer.zero_grad()
        if has_data.item() == dist.get_world_size():  # every rank has a batch: average the ranks' means
            x, y = batches[steps]
            nn.functional.mse_loss(model(x), y).backward()
            for weight in model.parameters():
                dist.all_reduce(weight.grad)
                weight.grad.div_(dist.get_world_size())
            optimizer.step()
            steps += 1
            continue
        count = torch.zeros(1, dtype=torch.float64)
        if steps < len(batches):
            x, y = batches[steps]
            nn.functional.mse_loss(model(x), y, reduction="sum").backward()
            count += y.numel()
        dist.all_reduce(count)
        for weight in model.parameters():
            if weight.grad is None:  # this rank had no batch
                weight.grad = torch.zeros_like(weight)
            dist.all_reduce(weight.grad)
            weight.grad.div_(count)
        optimizer.step()
        steps += 1
