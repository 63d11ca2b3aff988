# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: dividing twice (ReduceOp.AVG and then dividing by the world size again: 1/N^2 of the sum)
def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    world_size = dist.get_world_size(group)
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)
            p.grad /= world_size
