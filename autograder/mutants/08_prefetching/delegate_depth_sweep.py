# assignment: 08_prefetching
# grade_id: max_prefetch_depth
# catches: searching the depths with the chapter's old depth_sweep plot helper (it is no longer there)
from helpers.prefetch_plots import depth_sweep


def max_prefetch_depth(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                       activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """Largest prefetch depth whose peak live memory fits the budget (None if none does)."""
    fitting = [row["depth"] for row in depth_sweep(gather_s, compute_s, unit_bytes, activation_bytes, shard_bytes)
               if row["peak_bytes"] <= budget_bytes]
    return max(fitting) if fitting else None
