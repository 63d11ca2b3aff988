# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: summing over `group` but dividing by the default group's size
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad, group=group)
            param.grad.div_(dist.get_world_size())
