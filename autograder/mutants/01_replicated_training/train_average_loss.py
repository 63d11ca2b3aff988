# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: averaging the loss value across ranks instead of the gradients (backward stays local)
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
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        loss = loss * (global_loss / world_size) / loss.detach()
        loss.backward()
        opt.step()
    return model
