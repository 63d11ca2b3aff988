# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: all_reduce SUM of the gradients without dividing by the world size
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, group=group)
