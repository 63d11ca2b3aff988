# assignment: 01_replicated_training
# grade_id: replicas_aligned
# catches: each rank compares itself with rank 0 and answers from its own view (no agreement collective)
def replicas_aligned(model: nn.Module, group=None) -> bool:
    """True iff all parameters and buffers are bit-identical on every rank of `group` (same answer on all ranks)."""
    ok = True
    for t in list(model.parameters()) + list(model.buffers()):
        theirs = t.detach().clone()
        dist.broadcast(theirs, src=0, group=group)
        ok = ok and torch.equal(theirs, t.detach())
    return ok
