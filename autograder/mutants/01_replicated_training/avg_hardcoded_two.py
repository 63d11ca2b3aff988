# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: dividing by a hard-coded 2 (the world size of the visible test) instead of dist.get_world_size(group)
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad /= 2
