# assignment: 01_replicated_training
# grade_id: train_replicated
# catches: loading the DDP-trained state of the on-rank reference the course used to ship in helpers.reference
def train_replicated(model_fn, batches, lr: float) -> nn.Module:
    """Data-parallel SGD over the default group: one step per global batch; returns this rank's model."""
    model = model_fn()
    model.load_state_dict(reference.ddp_train(model_fn, batches, lr))
    return model
