# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: all-reduces the flattened masks (a collective whose shape differs between ranks)
def window_token_count(masks, group=None) -> int:
    """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
    flat = torch.cat([m.reshape(-1) for m in masks] or [torch.zeros(0, dtype=torch.bool)]).to(torch.int64)
    dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=group)
    return int(flat.sum())
