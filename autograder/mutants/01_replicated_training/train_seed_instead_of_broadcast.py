# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: relying on a fixed manual_seed before model_fn() instead of broadcasting (the ranks' model_fn seeds itself per rank)
def train_replicated(model_fn, batches, lr: float) -> nn.Module:
    """Data-parallel SGD over the default group: one step per global batch; returns this rank's model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, world_size)
        opt.zero_grad()
        F.mse_loss(model(xs), ys).backward()
        average_gradients(model)
        opt.step()
    return model
