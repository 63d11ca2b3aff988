# assignment: 08_prefetching
# grade_id: peak_live_bytes
# catches: the old planner: a landing buffer counted only from when the channel is free for its transfer, not from its issue
def peak_live_bytes(schedule: list[tuple[float, float, float, float]], unit_bytes: list[float],
                    activation_bytes: list[float], shard_bytes: float) -> float:
    """Peak bytes on one rank: shards + gathered units on [issue, end) + activations from their start on."""
    intervals = []
    for v, ((issue, _, _, end), b) in enumerate(zip(schedule, unit_bytes)):
        channel_free = schedule[v - 1][1] if v > 0 else 0.0
        intervals.append((max(issue, channel_free), end, b))
    intervals += [(start, float("inf"), b) for (_, _, start, _), b in zip(schedule, activation_bytes)]
    peak = 0.0
    for t, _, _ in intervals:
        peak = max(peak, sum(b for begin, end, b in intervals if begin <= t < end))
    return shard_bytes + peak
