# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: no prefetch: each unit gathered only when it is needed
def prefetching_forward(units: list, x: torch.Tensor, depth: int) -> torch.Tensor:
    """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
    handles = {}
    for k, unit in enumerate(units):
        for v in range(k, k + 1):
            if v not in handles:
                handles[v] = units[v].issue_gather()
        handles[k].wait()
        x = unit.module(x)
        unit.free()
    return x
