# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: a lossy scalar checksum (sum of every tensor) that misses swapped elements
def replicas_aligned(model: nn.Module, group=None) -> bool:
    """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
    checksum = torch.zeros(1, dtype=torch.float64)
    for t in list(model.parameters()) + list(model.buffers()):
        checksum += t.detach().double().sum()
    lo, hi = checksum.clone(), checksum.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    return bool(lo.item() == hi.item())
