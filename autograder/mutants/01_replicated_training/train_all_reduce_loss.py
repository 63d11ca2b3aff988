# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: all_reduce of the loss tensor itself before backward (the collective has no autograd: gradients stay local)
def train_replicated(model_fn, batches, lr: float) -> nn.Module:
    """Data-parallel SGD over the default group: one step per global batch; returns this rank's model."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = model_fn()
    broadcast_parameters(model, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, world_size)
        opt.zero_grad()
        loss = F.mse_loss(model(xs), ys)
        dist.all_reduce(loss)
        loss /= world_size
        loss.backward()
        opt.step()
    return model
