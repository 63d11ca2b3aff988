# assignment: 01_replicated_training
# grade_id: average_gradients
# catches: delegating to the private averaging helper the course used to ship in helpers.optim_sharding
from helpers.optim_sharding import _average_gradients


def average_gradients(model: nn.Module, group=None) -> None:
    """In place, make every parameter's .grad the mean of that gradient over `group`'s ranks."""
    _average_gradients(model.parameters(), group)
