# assignment: 08_prefetching
# grade_id: prefetching_forward
# catches: waiting on every in-flight handle before each compute: no overlap
def prefetching_forward(units: list, x: torch.Tensor, depth: int) -> torch.Tensor:
    """Forward through `units`, keeping the all-gathers of the next `depth` units in flight."""
    handles = {}
    for k, unit in enumerate(units):
        for v in range(k, min(k + depth, len(units) - 1) + 1):
            if v not in handles:
                handles[v] = units[v].issue_gather()
        for handle in handles.values():
            handle.wait()
        x = unit.module(x)
        unit.free()
    return x
