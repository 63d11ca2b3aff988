# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: treating src as a rank inside the group (group_src) rather than a global rank
def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
    for t in list(model.parameters()) + list(model.buffers()):
        if group is None:
            dist.broadcast(t.data, src=src)
        else:
            dist.broadcast(t.data, group=group, group_src=min(src, dist.get_world_size(group) - 1))
