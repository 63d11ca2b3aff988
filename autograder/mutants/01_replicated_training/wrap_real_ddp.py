# assignment: 01_replicated_training
# grade_id: replicated_model
# catches: wrapping PyTorch's own DistributedDataParallel instead of designing the wrapper (it passes every equality, but its C++ reducer issues no collective the ledger records)
# caught_by: test_replicated_training
from torch.nn.parallel import DistributedDataParallel


class ReplicatedModel(nn.Module):
    """DistributedDataParallel's contract over `group`, by DistributedDataParallel."""

    def __init__(self, module: nn.Module, group=None) -> None:
        super().__init__()
        self.ddp = DistributedDataParallel(module, process_group=group, find_unused_parameters=True)
        self.module = module

    def forward(self, *args, **kwargs):
        return self.ddp(*args, **kwargs)
