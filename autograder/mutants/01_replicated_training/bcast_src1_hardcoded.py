# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: a hard-coded source rank (src=1) left over from debugging
def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
    src = 1 if src else 0
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=src, group=group)
