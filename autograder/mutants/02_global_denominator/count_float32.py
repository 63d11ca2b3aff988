# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: float32 counts (exact only up to 2**24 tokens)
def window_token_count(masks, group=None) -> int:
    """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
    count = torch.tensor([float(sum(int(m.sum()) for m in masks))], dtype=torch.float32)
    dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
    return int(count.item())
