# assignment: 08_prefetching
# grade_id: plan_prefetch
# design: runs the forward program on a simulated clock (no prefetch_schedule); peak from free/alloc events
def plan_prefetch(gather_s: list[float], compute_s: list[float], unit_bytes: list[float],
                  activation_bytes: list[float], shard_bytes: float, budget_bytes: float) -> dict | None:
    """The depth to run within `budget_bytes` (the contract above) with its forward's peak (bytes) and exposed
    communication (seconds), or None if no depth fits."""
    units = len(gather_s)

    def simulate(depth):
        now = channel_free = blocked = 0.0
        landed, events, issued = {}, [], 0          # events: (time, 0 = free / 1 = allocate, bytes)
        for k in range(units):
            while issued <= min(k + depth, units - 1):
                events.append((now, 1, unit_bytes[issued]))
                channel_free = landed[issued] = max(now, channel_free) + gather_s[issued]
                issued += 1
            blocked += max(0.0, landed[k] - now)
            now = max(now, landed[k])
            events.append((now, 1, activation_bytes[k]))
            now += compute_s[k]
            events.append((now, 0, -unit_bytes[k]))
        live = top = 0.0
        for _, _, delta in sorted(events, key=lambda e: (e[0], e[1])):
            live += delta
            top = max(top, live)
        return shard_bytes + top, blocked

    fits = [(depth, peak, exposed) for depth, (peak, exposed) in enumerate(map(simulate, range(units)))
            if peak <= budget_bytes]
    if not fits:
        return None
    lowest = min(exposed for _, _, exposed in fits)
    depth, peak, exposed = next(f for f in fits if f[2] - lowest < 1e-9)
    return {"depth": depth, "peak_bytes": peak, "exposed_s": exposed}
