# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: returning the loss averaged over the ranks instead of this rank's local loss
def train_full_shard(model: nn.Module, units: list, batches: list, lr: float) -> list[float]:
    """SGD over the units' shards, one FULL_SHARD step per batch; returns the local losses."""
    optimizer = torch.optim.SGD([u.shard for u in units], lr=lr)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for unit in units:
            unit.reduce_gradients()
            unit.free()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / dist.get_world_size())
    return losses
