# assignment: 10_worker_failure
# grade_id: train_uneven
# catches: a rank that runs out of data stops calling collectives (its peers hang: a bounded CollectiveTimeout)
def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer, batches: list) -> int:
    """Train while any rank has a batch; never leave a collective to the others alone."""
    steps = 0
    while True:
        if steps == len(batches):
            return steps
        optimizer.zero_grad()
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
