# assignment: 07_parameter_sharding
# grade_id: FullyShardedUnit
# catches: building on lesson 08's forward-only PrefetchUnit (FSDP2's per-parameter layout, no backward, no gradients)
from helpers.prefetch import PrefetchUnit


class FullyShardedUnit(PrefetchUnit):
    """Parameters stored as one flat shard per rank; gathered around forward and backward."""

    def gather(self) -> None:
        self.issue_gather().wait()

    def reduce_gradients(self) -> None:
        for p in self.params:
            p.grad = None
