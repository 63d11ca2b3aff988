# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: choosing the parameters by requires_grad instead of by .grad: a trainable parameter that forward never used has no gradient to all-reduce
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    for param in model.parameters():
        if param.requires_grad:
            dist.all_reduce(param.grad, group=group)
            param.grad.div_(dist.get_world_size(group))
