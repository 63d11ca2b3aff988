# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: one count all-reduce per micro-batch (ranks with different numbers of micro-batches issue different collectives)
def window_token_count(masks, group=None) -> int:
    """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
    total = 0
    for m in masks:
        count = m.sum().to(torch.int64).reshape(1)
        dist.all_reduce(count, op=dist.ReduceOp.SUM, group=group)
        total += int(count.item())
    return total
