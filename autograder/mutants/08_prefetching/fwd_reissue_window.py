# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: re-issuing every all-gather of the window at each step (9 instead of 4 for depth 2)
def prefetching_forward(units: list, x: torch.Tensor, depth: int) -> torch.Tensor:
    """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
    handles = {}
    for k, unit in enumerate(units):
        for v in range(k, min(k + depth, len(units) - 1) + 1):
            handles[v] = units[v].issue_gather()
        handles[k].wait()
        x = unit.module(x)
        unit.free()
    return x
