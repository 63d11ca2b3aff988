"""Lesson 07's stored chapter data (``python -m autograder store``): the numbers chapter 07 prints, every
setting of its explorer, and the float64 results its visible tests compare with."""
from __future__ import annotations

import math
from typing import Any, Sequence

from autograder.lessons.costs import adam_memory_bytes, ring_allreduce_bytes
from autograder.store import FLOAT32_RESULTS
from helpers import l07_parameter_sharding as param_sharding
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyLM
from helpers.shared.state import SameInit, make_batches

from .verdicts import Event, fsdp_traffic_bytes, full_shard_schedule, sgd_full_batch, unit_gradients, unit_parameters


# --------------------------------------------------------------------------- the chapter's numbers

_MODES = {"True": True, "False": False}
EXPLORER_UNITS = (1, 2, 3, 4, 6, 8, 12, 16)
EXPLORER_WORLD_SIZES = (2, 4, 8, 16, 64, 256, 1024)
EXPLORER_PARAMS = (1_000_000_000, 7_500_000_000, 70_000_000_000)
CURVE_WORLD_SIZES = tuple(2 ** e for e in range(1, 11))
BYTES_PER_PARAM, ADAM_K = 2, 12


def split_params(num_params: int, num_units: int) -> list[int]:
    """``num_params`` elements in ``num_units`` units as equal as integers allow (larger first)."""
    q, r = divmod(int(num_params), num_units)
    return [q + (1 if u < r else 0) for u in range(num_units)]


def step_timeline(num_units: int, reshard_after_forward: bool) -> list[Event]:
    """The schedule with the computation inserted.

    ``("forward", u)`` right after the all-gather that first materialises unit ``u``,
    ``("backward", u)`` right before its reduce-scatter.
    """
    out: list[Event] = []
    forwarded: set[int] = set()
    for kind, unit in full_shard_schedule(num_units, reshard_after_forward):
        if kind == "reduce_scatter":
            out.append(("backward", unit))
        out.append((kind, unit))
        if kind == "all_gather" and unit not in forwarded:
            forwarded.add(unit)
            out.append(("forward", unit))
    return out


def availability(num_units: int, reshard_after_forward: bool) -> dict[str, Any]:
    """One entry per compute slot of a step: what runs and which units' full parameters exist meanwhile.

    ``slots``: dicts with ``phase`` (``"forward"``/``"backward"``), ``unit`` (the unit computing),
    ``gathered`` (sorted units materialised during the slot) and ``before`` (the events at the
    boundary just before the slot, in order, as ``[kind, unit]``); ``after``: the events after the
    last computation. Also the step's ``all_gathers``, ``reduce_scatters`` and ``max_gathered``.
    """
    slots: list[dict[str, Any]] = []
    pending: list[list[Any]] = []
    gathered: set[int] = set()
    for kind, unit in step_timeline(num_units, reshard_after_forward):
        if kind in ("forward", "backward"):
            slots.append({"phase": kind, "unit": unit, "gathered": sorted(gathered), "before": pending})
            pending = []
            continue
        pending.append([kind, unit])
        if kind == "all_gather":
            gathered.add(unit)
        elif kind == "free":
            gathered.discard(unit)
    events = full_shard_schedule(num_units, reshard_after_forward)
    return {"slots": slots, "after": pending,
            "all_gathers": sum(e[0] == "all_gather" for e in events),
            "reduce_scatters": sum(e[0] == "reduce_scatter" for e in events),
            "max_gathered": max((len(s["gathered"]) for s in slots), default=0)}


def live_parameter_bytes(unit_numels: Sequence[int], world_size: int, reshard_after_forward: bool | None,
                         bytes_per_param: int = BYTES_PER_PARAM) -> dict[str, Any]:
    """Parameter bytes allocated on one rank during every compute slot of a step.

    Every rank always stores its shards, ``S_u = ceil(n_u / N)`` elements per unit; a gathered
    unit adds its full padded buffer of ``N * S_u`` elements. ``reshard_after_forward=None`` is
    replicated training: every rank keeps all ``sum(n_u)`` elements. Gradients, activations and
    prefetch buffers are not counted. Returns ``slots`` (bytes per slot), ``between_steps``
    (bytes while no unit is gathered), ``peak`` and ``peak_slot`` (first slot reaching it).
    """
    units = len(unit_numels)
    if reshard_after_forward is None:
        total = float(sum(unit_numels) * bytes_per_param)
        return {"slots": [total] * (2 * units), "between_steps": total, "peak": total, "peak_slot": 0}
    shard = [math.ceil(n / world_size) for n in unit_numels]
    persistent = float(sum(shard) * bytes_per_param)
    slots = [persistent + sum(world_size * shard[u] for u in slot["gathered"]) * bytes_per_param
             for slot in availability(units, reshard_after_forward)["slots"]]
    peak = max(slots)
    return {"slots": slots, "between_steps": persistent, "peak": peak, "peak_slot": slots.index(peak)}


def traffic_and_memory(num_params: int, world_sizes: Sequence[int] = CURVE_WORLD_SIZES) -> dict[str, Any]:
    """Per world size: ring bytes per step (DDP, SHARD_GRAD_OP, FULL_SHARD) and ZeRO stage 0-3 Adam bytes."""
    b = BYTES_PER_PARAM
    return {"world_sizes": list(world_sizes),
            "ddp": [ring_allreduce_bytes(num_params, b, n) for n in world_sizes],
            "shard_grad_op": [fsdp_traffic_bytes(num_params, b, n, False) for n in world_sizes],
            "full_shard": [fsdp_traffic_bytes(num_params, b, n, True) for n in world_sizes],
            "stages": [[adam_memory_bytes(num_params, n, stage, ADAM_K) for n in world_sizes] for stage in range(4)]}


def explorer_case(num_params: int, world_size: int, num_units: int) -> dict[str, Any]:
    """The explorer's numbers for one slider setting: live parameters of the three modes and traffic."""
    numels = split_params(num_params, num_units)
    return {"live": {str(mode): live_parameter_bytes(numels, world_size, mode) for mode in (True, False, None)},
            "traffic": {key: fsdp_traffic_bytes(num_params, BYTES_PER_PARAM, world_size, mode)
                        for key, mode in _MODES.items()},
            "ddp_traffic": ring_allreduce_bytes(num_params, BYTES_PER_PARAM, world_size),
            "stage3_bytes": adam_memory_bytes(num_params, world_size, 3, ADAM_K),
            "stage0_bytes": adam_memory_bytes(num_params, world_size, 0, ADAM_K)}


def explorer_results() -> dict[str, Any]:
    """Every slider setting of :func:`helpers.l07_parameter_sharding.plots.param_sharding_explorer`."""
    return {"num_units": list(EXPLORER_UNITS), "world_sizes": list(EXPLORER_WORLD_SIZES),
            "num_params": list(EXPLORER_PARAMS), "bytes_per_param": BYTES_PER_PARAM, "k": ADAM_K,
            "availability": {str(u): {key: availability(u, mode) for key, mode in _MODES.items()}
                             for u in EXPLORER_UNITS},
            "curves": {str(psi): traffic_and_memory(psi) for psi in EXPLORER_PARAMS},
            "cases": {f"{psi}/{n}/{u}": explorer_case(psi, n, u)
                      for psi in EXPLORER_PARAMS for n in EXPLORER_WORLD_SIZES for u in EXPLORER_UNITS}}


def chapter_results() -> dict[str, Any]:
    """The numbers chapter 07 prints: schedules, the ZeRO example, the FSDP2 comparison, tied-weight owners."""
    psi, n = 7_500_000_000, 64
    widths, world = (8, 12, 8, 4), 2
    unit_sizes = [sum(p.numel() for p in m.parameters()) for m in list(param_sharding.layered_mlp(widths))[::2]]
    lm = TinyLM()
    numel = {name: p.numel() for name, p in lm.named_parameters()}
    owners = unit_parameters(lm, ["embed", "blocks.0", "blocks.1", "head"])
    return {
        "schedule_2_units": {key: [list(e) for e in full_shard_schedule(2, mode)] for key, mode in _MODES.items()},
        "zero_example": {"num_params": psi, "world_size": n, "bytes_per_param": BYTES_PER_PARAM,
                         "stages": [adam_memory_bytes(psi, n, stage, ADAM_K) for stage in range(4)],
                         "ddp": ring_allreduce_bytes(psi, BYTES_PER_PARAM, n),
                         "traffic": {key: fsdp_traffic_bytes(psi, BYTES_PER_PARAM, n, mode)
                                     for key, mode in _MODES.items()}},
        "fsdp2_comparison": {
            "widths": list(widths), "world_size": world, "unit_sizes": unit_sizes, "num_params": sum(unit_sizes),
            "ddp": ring_allreduce_bytes(sum(unit_sizes), 4, world),
            "modes": {key: {"all_gathers": sum(e[0] == "all_gather" for e in full_shard_schedule(3, mode)),
                            "reduce_scatters": sum(e[0] == "reduce_scatter" for e in full_shard_schedule(3, mode)),
                            "bytes": fsdp_traffic_bytes(sum(unit_sizes), 4, world, mode)}
                      for key, mode in _MODES.items()}},
        "tinylm_owners": [[unit, names, sum(numel[name] for name in names)] for unit, names in owners.items()],
    }


# The visible tests of source/07_parameter_sharding (cells test_fully_sharded_unit and
# test_train_full_shard) run these cases; change them together.
VISIBLE_UNIT = {"model_fn": SameInit(param_sharding.layered_mlp, seed=1, kwargs={"widths": (6, 10, 7, 3)}),
                "batch": {"num_steps": 1, "batch_size": 8, "in_features": 6, "out_features": 3, "seed": 2}}
VISIBLE_TRAIN = {"model_fn": SameInit(param_sharding.layered_mlp, seed=3, kwargs={"widths": (6, 10, 7, 3)}),
                 "batches": {"num_steps": 3, "batch_size": 8, "in_features": 6, "out_features": 3, "seed": 4},
                 "lr": 0.1}


def visible_results() -> dict[str, Any]:
    """The float64 results the visible tests compare with (see ``helpers.l07_parameter_sharding.stored_expected``)."""
    batch = make_batches(**VISIBLE_UNIT["batch"])[0]
    trained = sgd_full_batch(VISIBLE_TRAIN["model_fn"], make_batches(**VISIBLE_TRAIN["batches"]), VISIBLE_TRAIN["lr"])
    gradients = unit_gradients(VISIBLE_UNIT["model_fn"], batch)
    return {"unit_gradients": tensors_to_json({str(u): g for u, g in enumerate(gradients)}),
            "trained_state": tensors_to_json(trained)}


STORED_ROUNDING = {"07_visible": FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {"07_chapter": chapter_results, "07_explorer": explorer_results,
          param_sharding.STORED_VISIBLE: visible_results}
