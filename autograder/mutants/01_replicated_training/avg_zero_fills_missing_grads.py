# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: giving an unused trainable parameter a zero gradient instead of leaving its .grad at None
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    for param in model.parameters():
        if not param.requires_grad:
            continue
        if param.grad is None:
            param.grad = torch.zeros_like(param)
        dist.all_reduce(param.grad, group=group)
        param.grad.div_(dist.get_world_size(group))
