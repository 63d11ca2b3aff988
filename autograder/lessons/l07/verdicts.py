"""Lesson 07, parameter sharding (FULL_SHARD): references and hidden checks, never sent to the kernel.

A **unit** is a module whose parameters are stored flat and sharded: the flat vector of its
``numel`` parameter elements is padded to ``N * S`` (``S = ceil(numel / N)``) and rank ``r``
keeps elements ``[r*S, (r+1)*S)``, the layout of lesson 06. A unit materialises its full
parameters only around the operations that need them: an all-gather before its forward, a
free after it, a second all-gather before its backward (FULL_SHARD), a reduce-scatter of its
gradient and a free after backward.

The drivers that run a student's unit and loop on gloo, and the checks against PyTorch
(autograd, SGD, real FSDP2), are student-side (:mod:`helpers.l07_parameter_sharding`); the checks here
pass a student's values through :mod:`autograder.plain` first. What the hidden checks send to
the ranks (:mod:`.drivers`) solves no exercise (issue 23): a student's unit trains under
:func:`step_shards_by_hand` (no optimizer, one batch per call), a student's loop trains
:class:`RecordingUnit` stand-ins that shard nothing. Known-correct solutions of both exercises,
for testing these checks, live in ``tests/test_l07_parameter_sharding.py``. Sizes are elements unless a
name says bytes; traffic is the bytes one rank sends under ring algorithms
(:mod:`autograder.lessons.costs`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from autograder.lessons.costs import ring_allgather_bytes, ring_reduce_scatter_bytes
from autograder.lessons.l01 import run_in_subgroup
from autograder.plain import number, plain
from helpers import l07_parameter_sharding as param_sharding
from helpers.runtime.cluster import run
from helpers.shared.checks import first_difference
from helpers.shared.models import shard_batch
from helpers.shared.state import SameInit, make_batches, mse, state_of

from .drivers import recorded_train_on_rank, step_shards_by_hand, train_in_subgroup_on_rank

Event = tuple[str, int]
_GATHERS = ("all_gather_single", "all_gather_into_tensor")
_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor")


# --------------------------------------------------------------------------- references


def full_shard_schedule(num_units: int, reshard_after_forward: bool = True) -> list[Event]:
    """Communication and memory events of one training step, without prefetching.

    Forward visits units ``0..U-1``: ``all_gather``, then ``free`` if
    ``reshard_after_forward`` (FULL_SHARD; otherwise SHARD_GRAD_OP keeps them). Backward
    visits ``U-1..0``: ``all_gather`` again if the unit was freed, ``reduce_scatter`` of its
    gradient, ``free``.
    """
    events: list[Event] = []
    for u in range(num_units):
        events.append(("all_gather", u))
        if reshard_after_forward:
            events.append(("free", u))
    for u in reversed(range(num_units)):
        if reshard_after_forward:
            events.append(("all_gather", u))
        events += [("reduce_scatter", u), ("free", u)]
    return events


def fsdp_traffic_bytes(num_params: int, bytes_per_param: int, world_size: int,
                       reshard_after_forward: bool = True) -> float:
    """Ring bytes one rank sends per step: all-gathers (2 or 1 per unit) plus one reduce-scatter.

    FULL_SHARD: ``3 (N-1)/N * Psi * b``; SHARD_GRAD_OP: ``2 (N-1)/N * Psi * b``, the same
    as DDP's all-reduce.
    """
    gathers = 2 if reshard_after_forward else 1
    return (gathers * ring_allgather_bytes(num_params, bytes_per_param, world_size)
            + ring_reduce_scatter_bytes(num_params, bytes_per_param, world_size))


def unit_parameters(model: nn.Module, unit_names: Sequence[str]) -> dict[str, list[str]]:
    """The parameter names each unit shards; ``""`` (the root) takes the rest and every shared one.

    A parameter belongs to the innermost unit (units may be nested) whose module contains all
    of its names (a tied parameter has several, see ``named_parameters(remove_duplicate=False)``):
    a name lies inside unit ``u`` when it starts with ``u + "."``. A parameter that no unit
    contains whole goes to the root, the common ancestor, as FSDP requires. Each parameter
    appears once, under its first name.
    """
    names_of: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(p), []).append(name)
    out: dict[str, list[str]] = {u: [] for u in [*unit_names, ""]}
    for name, p in model.named_parameters():
        holders = [u for u in unit_names if all(n.startswith(u + ".") for n in names_of[id(p)])]
        out[max(holders, key=len, default="")].append(name)  # nested holders: the longest name is innermost
    return out


# --------------------------------------------------------------------------- hidden checks


def _events(fn: Callable[..., Any], units: int, reshard: bool) -> list[Event]:
    got = plain(fn(units, reshard), f"full_shard_schedule({units}, reshard_after_forward={reshard})")
    return [tuple(e) if isinstance(e, (list, tuple)) else e for e in got] if isinstance(got, (list, tuple)) else got


def check_schedule(fn: Callable[..., list[Event]], cases: Sequence[tuple[int, bool]]) -> None:
    """``fn(num_units, reshard_after_forward)`` equals :func:`full_shard_schedule`."""
    for units, reshard in cases:
        exp, got = full_shard_schedule(units, reshard), _events(fn, units, reshard)
        if got != exp:
            hint = ""
            if isinstance(got, list):
                gathers, exp_gathers = sum(e[0] == "all_gather" for e in got), sum(e[0] == "all_gather" for e in exp)
                if gathers != exp_gathers:
                    hint = (f" It all-gathers {gathers} times; a step needs {exp_gathers} "
                            f"({'twice' if reshard else 'once'} per unit).")
                elif sum(e[0] == "free" for e in got) != sum(e[0] == "free" for e in exp):
                    hint = " Some gathered parameters are never freed, or freed twice."
            raise AssertionError(f"full_shard_schedule({units}, reshard_after_forward={reshard}) returned "
                                 f"{got!r:.200}, expected {exp!r:.200}.{hint}")


def check_matches_fsdp2(fn: Callable[..., list[Event]], counts: dict[str, Any], ledger: Any, reshard: bool) -> None:
    """The schedule's collective counts per step equal what real FSDP2 issued (from the ledger)."""
    units = counts["units"]
    events = _events(fn, units, reshard)
    for op, ledger_ops in (("all_gather", _GATHERS), ("reduce_scatter", _SCATTERS)):
        mine = sum(1 for e in events if e[0] == op)
        real = sum(ledger.count(name) for name in ledger_ops)
        if mine != real:
            raise AssertionError(f"{units} units, reshard_after_forward={reshard}: your schedule has {mine} {op}s "
                                 f"per step; real FSDP2 (fully_shard) issued {real}.")


def check_traffic(fn: Callable[..., float], cases: Sequence[tuple[int, int, int, bool]]) -> None:
    """``fn`` equals :func:`fsdp_traffic_bytes` on every case."""
    for num_params, b, n, reshard in cases:
        call = f"fsdp_traffic_bytes({num_params}, {b}, {n}, reshard_after_forward={reshard})"
        exp, got = fsdp_traffic_bytes(num_params, b, n, reshard), number(fn(num_params, b, n, reshard), call)
        if abs(got - exp) > 1e-9 * max(1.0, exp):
            raise AssertionError(f"{call} returned {got!r}, expected {exp:,.1f} bytes.")


def check_traffic_measured(fn: Callable[..., float], ledger: Any, num_params: int, reshard: bool) -> None:
    """``fn`` predicts the ring bytes real FSDP2 issued (sizes divisible by N: no padding)."""
    n = ledger.world_size
    measured = ledger.bytes(0)
    predicted = number(fn(num_params, 4, n, reshard), f"fsdp_traffic_bytes({num_params}, 4, {n}, {reshard})")
    if abs(predicted - measured) > 1e-6 * measured:
        raise AssertionError(f"real FSDP2 with {num_params} float32 parameters on {n} ranks "
                             f"(reshard_after_forward={reshard}) sent {measured:,.0f} ring bytes per rank in one "
                             f"step; fsdp_traffic_bytes predicts {predicted:,.0f}.")


def _unit_hint(got: dict[str, Any], exp: dict[str, list[str]]) -> str:
    """Why ``got`` differs from ``exp``, when one of the known mistakes explains it."""
    flat = [n for v in got.values() if isinstance(v, (list, tuple)) for n in v]
    if len(flat) != len(set(flat)) or len(flat) > sum(len(v) for v in exp.values()):
        return (" A parameter appears in two units: a tied weight would be sharded (and updated) twice, "
                "once per copy.")
    for unit, names in got.items():
        wrong = [n for n in names if n not in exp.get(unit, [])]
        owner = next((u for u, v in exp.items() if wrong and wrong[0] in v), None)
        if owner is None:
            continue
        if owner and owner.startswith(unit + "."):
            return (f" {wrong[0]!r} is inside unit {owner!r}, which is nested in {unit!r}: the innermost unit "
                    f"shards it.")
        if unit and owner != unit and wrong[0].startswith(unit) and not wrong[0].startswith(unit + "."):
            return (f" {wrong[0]!r} starts with {unit!r} but is not inside that unit: a name lies inside unit u when "
                    f"it starts with u + \".\".")
        if owner == "":
            return (" A parameter shared by two units must go to their common ancestor, the root \"\": split "
                    "across units its copies desynchronise.")
    return ""


def check_unit_parameters(fn: Callable[..., dict[str, list[str]]], model: nn.Module,
                           unit_names: Sequence[str]) -> None:
    """``fn`` assigns every parameter exactly once: to the innermost unit containing all its names, else the root."""
    exp = unit_parameters(model, unit_names)
    got = plain(fn(model, list(unit_names)), f"unit_parameters(model, {list(unit_names)})")
    if not isinstance(got, dict) or {k: list(v) for k, v in got.items()} != exp:
        hint = _unit_hint(got, exp) if isinstance(got, dict) else ""
        raise AssertionError(f"unit_parameters(model, {list(unit_names)}) returned {got!r:.300}, expected "
                             f"{exp!r:.300}.{hint}")


def sgd_full_batch(model_fn: Callable[[], nn.Module], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                   lr: float) -> dict[str, torch.Tensor]:
    """float64 single-process SGD on the full batches: what sharded training must reproduce."""
    model = model_fn().double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        mse(model(x.double()), y.double()).backward()
        opt.step()
    return state_of(model)


def unit_gradients(model_fn: Callable[[], nn.Module], batch: tuple[torch.Tensor, torch.Tensor]) -> list[torch.Tensor]:
    """float64 full-batch mean gradient of every unit (Linear) of ``model_fn()``, flat in ``parameters()`` order."""
    model = model_fn().double()
    x, y = batch
    mse(model(x.double()), y.double()).backward()
    return [torch.cat([p.grad.reshape(-1) for p in unit.parameters()]) for unit in model[::2]]


def assert_sharded_training(results: Sequence[dict[str, Any]], model_fn: Callable[[], nn.Module],
                            batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, ledger: Any) -> None:
    """The ranks' results (plain) end at full-batch SGD's state; see the student-side check."""
    param_sharding.assert_sharded_training(plain(results, "the ranks' results"), sgd_full_batch(model_fn, batches, lr),
                                           len(batches), ledger)


def check_unit_trains(unit_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                       batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, world_size: int) -> None:
    """``unit_cls`` on every Linear, trained on ``world_size`` ranks by :func:`step_shards_by_hand`, one batch per
    call: it ends at full-batch SGD, frees after every step, and sends at most FULL_SHARD's ring bytes."""
    out, ledger = run(param_sharding.shard_train_on_rank, unit_cls, step_shards_by_hand, model_fn, batches, lr,
                      world_size=world_size, ledger=True, timeout=60)
    assert_sharded_training(out, model_fn, batches, lr, ledger)


def check_unit_in_subgroup(unit_cls: Callable[..., Any], widths: Sequence[int], ranks: Sequence[int],
                            seed: int) -> None:
    """Of 4 ranks, only ``ranks`` (a ``new_group``) train through ``unit_cls``; they end at full-batch SGD.

    The other ranks call nothing but ``new_group`` and a barrier: a unit that issues a
    collective on the default group, or waits for them, fails at once.
    """
    model_fn = SameInit(param_sharding.layered_mlp, seed=seed, kwargs={"widths": tuple(widths)})
    batches = make_batches(3, 4 * len(ranks), widths[0], widths[-1], seed=seed + 1)
    what = "FullyShardedUnit(module, group)"
    out = run_in_subgroup(train_in_subgroup_on_rank, unit_cls, model_fn, batches, 0.05, list(ranks), ranks=ranks,
                          what=what)
    try:
        param_sharding.assert_sharded_training([out[r] for r in ranks], sgd_full_batch(model_fn, batches, 0.05),
                                               len(batches), None)
    except AssertionError as exc:
        raise AssertionError(f"{what} with group = dist.new_group({list(ranks)}) of 4 ranks (ranks below count "
                             f"within the group; N = dist.get_world_size(group), r = dist.get_rank(group)): "
                             f"{exc}") from None


def check_unit_step(results: Sequence[dict[str, Any]], model_fn: Callable[[], nn.Module],
                     batch: tuple[torch.Tensor, torch.Tensor], ledger: Any) -> None:
    """One step through the units (plain results) agrees with the unsharded model; see the student-side check."""
    param_sharding.assert_unit_step(plain(results, "the ranks' results"), model_fn, batch, ledger,
                                    unit_gradients(model_fn, batch))


# The events one unit records per batch of a correct loop (RecordingUnit): the loop's own calls are the last two.
LOOP_EVENTS = ["forward", "backward", "reduce_gradients", "free"]


def local_losses(model_fn: Callable[[], nn.Module], batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float,
                 world_size: int) -> list[list[float]]:
    """float64, per rank: the loss of its rows of every batch, with the parameters full-batch SGD has before it."""
    model = model_fn().double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses: list[list[float]] = [[] for _ in range(world_size)]
    for x, y in batches:
        x, y = x.double(), y.double()
        with torch.no_grad():
            for rank in range(world_size):
                xs, ys = shard_batch(x, y, rank, world_size)
                losses[rank].append(float(mse(model(xs), ys)))
        opt.zero_grad(set_to_none=True)
        mse(model(x), y).backward()
        opt.step()
    return losses


def _changed(a: list[Any], b: list[Any]) -> bool:
    """Whether a shard changed between two log entries (its version counter or its values)."""
    return a[2] != b[2] or not torch.equal(a[3], b[3])


def _loop_calls_problem(log: list[list[Any]], units: int, steps: int) -> str | None:
    """What the recorded events of one rank say the loop did wrong, or ``None``."""
    gathers = sum(e[0] == "gather" for e in log)
    if gathers:
        return (f"train_full_shard called unit.gather() {gathers} time(s) in {steps} batches: the units gather "
                f"themselves (before their forward, and when backward reaches them); a gather() of the loop is "
                f"one all-gather too many.")
    for u in range(units):
        events = [e for e in log if e[1] == u]
        kinds = [e[0] for e in events if e[0] != "return"]
        for kind, what in (("forward", "forward passes through"),
                           ("reduce_gradients", "calls of reduce_gradients() on"), ("free", "calls of free() on")):
            count = kinds.count(kind)
            if count != steps:
                return (f"{steps} batches made {count} {what} unit {u}; expected exactly one per batch (one forward "
                        f"of the model, then each unit's reduce_gradients() and free() once).")
        if kinds != LOOP_EVENTS * steps:
            t = next(t for t in range(steps) if kinds[4 * t: 4 * t + 4] != LOOP_EVENTS)
            return (f"on batch {t}, unit {u} saw {kinds[4 * t: 4 * t + 4]}; expected {LOOP_EVENTS}: forward, backward "
                    f"(loss.backward()), then the unit's reduce_gradients(), then its free().")
        marks = [i for i, e in enumerate(events) if e[0] != "return"]
        for t in range(steps):
            forward, reduce, free = (events[marks[4 * t + k]] for k in (0, 2, 3))
            after = events[marks[4 * t + 3] + 1]   # the next batch's forward, or the end of the call ("return")
            if _changed(forward, reduce):
                return (f"unit {u}'s shard changed between its forward and its reduce_gradients() on batch {t}: step "
                        f"only after every unit's reduce_gradients(), which stores the batch's gradient in "
                        f"shard.grad.")
            if not _changed(reduce, after):
                then = "the next batch's forward" if after[0] == "forward" else "train_full_shard returned"
                return (f"unit {u}'s shard did not change between its reduce_gradients() on batch {t} and the moment "
                        f"{then}: step once per batch, after reduce_gradients() and free(), with an optimizer over "
                        f"the units' shards (unit.shard), not the module's parameters.")
    return None


def check_train_full_shard(train_fn: Callable[..., list[float]], model_fn: Callable[[], nn.Module],
                            batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, world_size: int,
                            batches_per_call: int) -> None:
    """``train_fn`` trains :class:`RecordingUnit` stand-ins on ``world_size`` ranks, ``batches_per_call`` per call.

    Per rank: one Python float per batch; the recorded calls (per batch and unit: forward,
    backward, ``reduce_gradients()``, ``free()``; no ``gather()``; the shard unchanged until its
    ``reduce_gradients()`` and changed before the next forward); the final parameters against
    float64 full-batch SGD; the losses against the local losses along that trajectory.
    """
    out = plain(run(recorded_train_on_rank, train_fn, model_fn, batches, lr, batches_per_call, world_size=world_size,
                    timeout=60), "the ranks' results")
    steps, units = len(batches), len(model_fn()[::2])
    expected, init = sgd_full_batch(model_fn, batches, lr), state_of(model_fn())
    losses = local_losses(model_fn, batches, lr, world_size)
    where = f"{world_size} ranks, {batches_per_call} batch(es) per call of train_full_shard"
    for rank, r in enumerate(out):
        if len(r["losses"]) != steps or not all(type(loss) is float for loss in r["losses"]):
            raise AssertionError(f"{where}, rank {rank}: {steps} batches gave the losses {r['losses']!r:.120}; "
                                 f"expected one Python float per batch, every batch of every call.")
        problem = _loop_calls_problem(r["log"], units, steps)
        if problem is not None:
            raise AssertionError(f"{where}, rank {rank}: {problem}")
        diff = first_difference(r["final"], expected, atol=1e-5, rtol=1e-4)
        if diff is not None:
            unchanged = first_difference(r["final"], init, atol=0.0, rtol=0.0) is None
            hint = (" The parameters never changed: is the optimizer stepping the shards (unit.shard)?"
                    if unchanged else "")
            raise AssertionError(f"{where}, rank {rank}: after {steps} steps the parameters differ from "
                                 f"single-process SGD on the full batch ({diff}).{hint}")
        bad = [t for t, (got, exp) in enumerate(zip(r["losses"], losses[rank]))
               if abs(got - exp) > 1e-5 + 1e-4 * abs(exp)]
        if bad:
            t = bad[0]
            raise AssertionError(f"{where}, rank {rank}: batch {t} returned the loss {r['losses'][t]!r}, expected "
                                 f"{losses[rank][t]:.6g}: the mean squared error of this rank's rows, computed "
                                 f"before the step.")
