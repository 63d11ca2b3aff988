# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: issuing unit k+d+1 before freeing unit k: d + 2 units allocated at once, invisible at every computation
def prefetching_forward(units: list, x: torch.Tensor, depth: int) -> torch.Tensor:
    """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
    handles = {v: units[v].issue_gather() for v in range(min(depth + 1, len(units)))}
    for k, unit in enumerate(units):
        handles.pop(k).wait()
        x = unit.module(x)
        if k + depth + 1 < len(units):
            handles[k + depth + 1] = units[k + depth + 1].issue_gather()
        unit.free()
    return x
