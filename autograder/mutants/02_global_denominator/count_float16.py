# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: float16 counts (exact only up to 2048, overflow above 65504)
def window_token_count(masks, group=None) -> int:
    """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
    count = torch.zeros(1, dtype=torch.float16)
    for m in masks:
        count += m.sum()
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    return int(count.item())
