# assignment: 07_parameter_sharding
# grade_id: full_shard_schedule
# catches: reading the schedule back out of the explorer's stored results (only the explorer's unit counts are stored)
from helpers.param_sharding_plots import stored_results


def full_shard_schedule(num_units: int, reshard_after_forward: bool = True) -> list[tuple[str, int]]:
    """(kind, unit) events of one FULL_SHARD (or SHARD_GRAD_OP) training step."""
    steps = stored_results()["availability"]
    if str(num_units) not in steps:
        return []
    step = steps[str(num_units)][str(bool(reshard_after_forward))]
    return [tuple(e) for slot in step["slots"] for e in slot["before"]] + [tuple(e) for e in step["after"]]
