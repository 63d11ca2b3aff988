# assignment: 02_global_denominator
# grade_id: window_token_count
# catches: gathering every rank's masks and counting them with helpers.denominator.window_count (no longer on the student side)
from helpers.data import TokenBatch


def window_token_count(masks, group=None) -> int:
    """Valid tokens in all micro-batches of the window on all ranks of `group` (one int64 all-reduce)."""
    window = [None] * dist.get_world_size(group)
    dist.all_gather_object(window, [TokenBatch(m, m, m) for m in masks], group=group)
    return denominator.window_count(window)
