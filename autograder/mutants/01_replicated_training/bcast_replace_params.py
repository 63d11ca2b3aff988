# assignment: 01_replicated_training
# grade_id: broadcast_parameters
# catches: replacing parameters with new nn.Parameter objects (an optimizer built earlier keeps the old ones)
def broadcast_parameters(model: nn.Module, src: int = 0, group=None) -> None:
    """In place, copy every parameter and buffer of rank `src` (global rank) to all ranks of `group`."""
    for module in model.modules():
        for name, p in list(module.named_parameters(recurse=False)):
            received = p.detach().clone()
            dist.broadcast(received, src=src, group=group)
            setattr(module, name, nn.Parameter(received, requires_grad=p.requires_grad))
    for b in model.buffers():
        dist.broadcast(b, src=src, group=group)
