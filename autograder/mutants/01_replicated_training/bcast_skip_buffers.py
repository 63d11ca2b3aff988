# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: broadcasting parameters only, so running statistics and integer counters stay per-rank
def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
    for p in model.parameters():
        dist.broadcast(p.data, src=src, group=group)
