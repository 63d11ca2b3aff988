# assignment: 07_parameter_sharding
# grade_id: train_full_shard
# catches: gathering every unit before forward: the units gather themselves, so each step all-gathers once too often
def train_full_shard(model: nn.Module, units: list, batches: list, lr: float) -> list[float]:
    """SGD over the units' shards, one FULL_SHARD step per batch; returns the local losses."""
    optimizer = torch.optim.SGD([u.shard for u in units], lr=lr)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        for unit in units:
            unit.gather()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for unit in units:
            unit.reduce_gradients()
            unit.free()
        optimizer.step()
        losses.append(loss.item())
    return losses
