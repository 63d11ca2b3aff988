# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: broadcasting from global rank 0 inside a group that may not contain it
def replicas_aligned(model: nn.Module, group=None) -> bool:
    """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
    ok = True
    for t in list(model.parameters()) + list(model.buffers()):
        theirs = t.detach().clone()
        dist.broadcast(theirs, src=0, group=group)
        ok = ok and torch.equal(theirs, t.detach())
    flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
