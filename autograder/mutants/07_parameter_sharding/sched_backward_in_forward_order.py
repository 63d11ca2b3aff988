# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: backward visiting the units in forward order
def full_shard_schedule(num_units: int, reshard_after_forward: bool = True) -> list[tuple[str, int]]:
    """(kind, unit) events of one FULL_SHARD (or SHARD_GRAD_OP) training step."""
    events = []
    for u in range(num_units):
        events.append(("all_gather", u))
        if reshard_after_forward:
            events.append(("free", u))
    for u in range(num_units):
        if reshard_after_forward:
            events.append(("all_gather", u))
        events += [("reduce_scatter", u), ("free", u)]
    return events
