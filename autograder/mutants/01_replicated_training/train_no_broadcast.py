# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: no initial broadcast: every rank starts from its own seed, so the replicas never agree
def train_replicated(model_fn, batches, lr: float) -> nn.Module:
    """Data-parallel SGD over the default group: one step per global batch; returns this rank's model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = model_fn()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, world_size)
        opt.zero_grad()
        F.mse_loss(model(xs), ys).backward()
        average_gradients(model)
        opt.step()
    return model
