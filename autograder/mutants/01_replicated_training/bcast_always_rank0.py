# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: broadcasting from rank 0 whatever src says
def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=0, group=group)
