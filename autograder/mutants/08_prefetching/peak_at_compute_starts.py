# assignment: 08_prefetching
# grade_id: peak_live_bytes
# catches: live bytes sampled only at compute starts (a unit with zero compute time is freed at its start, unseen)
def peak_live_bytes(schedule: list[tuple[float, float, float, float]], unit_bytes: list[float],
                    activation_bytes: list[float], shard_bytes: float) -> float:
    """Peak bytes on one rank: shards + gathered units on [issue, end) + activations from their start on."""
    intervals = [(issue, end, b) for (issue, _, _, end), b in zip(schedule, unit_bytes)]
    intervals += [(start, float("inf"), b) for (_, _, start, _), b in zip(schedule, activation_bytes)]
    peak = 0.0
    for _, _, t, _ in schedule:
        peak = max(peak, sum(b for begin, end, b in intervals if begin <= t < end))
    return shard_bytes + peak
