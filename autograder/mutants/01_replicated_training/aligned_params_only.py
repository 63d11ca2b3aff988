# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: comparing parameters only (buffers such as running stats or step counters are ignored)
def replicas_aligned(model: nn.Module, group=None) -> bool:
    """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
    ok = True
    for p in model.parameters():
        theirs = p.detach().clone()
        dist.broadcast(theirs, src=0, group=group)
        ok = ok and torch.equal(theirs, p.detach())
    flag = torch.tensor([int(ok)])
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())
