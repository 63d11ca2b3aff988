# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: every rank trains on the whole global batch (replicas agree and match SGD, but nothing is data-parallel)
def train_replicated(model_fn, batches, lr: float) -> nn.Module:
    """Data-parallel SGD over the default group: one step per global batch; returns this rank's model."""
    model = model_fn()
    broadcast_parameters(model, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    return model
