"""Lesson 07, parameter sharding (FULL_SHARD): references, drivers, hidden checks and the chapter's stored results.

A **unit** is a module whose parameters are stored flat and sharded: the flat vector of its
``numel`` parameter elements is padded to ``N * S`` (``S = ceil(numel / N)``) and rank ``r``
keeps elements ``[r*S, (r+1)*S)``, the layout of lesson 06. A unit materialises its full
parameters only around the operations that need them: an all-gather before its forward, a
free after it, a second all-gather before its backward (FULL_SHARD), a reduce-scatter of its
gradient and a free after backward.

The drivers that run a student's unit and loop on gloo, and the checks against PyTorch
(autograd, SGD, real FSDP2), are student-side (:mod:`helpers.l07_parameter_sharding`); the checks here
pass a student's values through :mod:`autograder.plain` first. What the hidden checks send to
the ranks solves no exercise (issue 23): a student's unit trains under
:func:`step_shards_by_hand` (no optimizer, one batch per call), a student's loop trains
:class:`RecordingUnit` stand-ins that shard nothing. Known-correct solutions of both exercises,
for testing these checks, live in ``tests/test_l07_parameter_sharding.py``. Sizes are elements unless a
name says bytes; traffic is the bytes one rank sends under ring algorithms
(:mod:`autograder.lessons.costs`).
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.costs import (adam_memory_bytes, ring_allgather_bytes, ring_allreduce_bytes,
                                      ring_reduce_scatter_bytes)
from autograder.lessons.l01 import in_subgroup, run_in_subgroup
from autograder.store import FLOAT32_RESULTS
from autograder.plain import number, plain
from helpers import l07_parameter_sharding as param_sharding
from helpers.shared.checks import first_difference
from helpers.runtime.cluster import run
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyLM, shard_batch
from helpers.shared.state import SameInit, make_batches, mse, rank_shard, state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "RecordingUnit",
    "block_mlp",
    "recorded_train_on_rank",
    "step_shards_by_hand",
    "train_in_subgroup_on_rank",
})

Event = tuple[str, int]
_GATHERS = ("all_gather_single", "all_gather_into_tensor")
_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor")
# Ship this module's rank-side code (the drivers and the stand-in unit below) by value: a rank then never
# imports the autograder package. None of it solves an exercise: the units' loop steps the shards by hand,
# one batch per call, and the loop's stand-in unit keeps every parameter unsharded.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


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


def block_mlp(widths: Sequence[int], hidden: int) -> nn.Sequential:
    """A hidden model whose units are blocks: ``Linear(a, hidden), Tanh, Linear(hidden, b)`` per pair of widths,
    ReLUs between the blocks (the blocks are ``model[::2]``)."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Sequential(nn.Linear(widths[i], hidden), nn.Tanh(), nn.Linear(hidden, widths[i + 1])))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def step_shards_by_hand(model: nn.Module, units: Sequence[Any], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                        lr: float) -> list[float]:
    """Drives a unit under test through one batch: not the exercise's loop (no optimizer, one batch only).

    Forward and backward; the units' ``reduce_gradients()`` and ``free()`` from the last unit to
    the first; then ``shard -= lr * shard.grad`` in place and the gradient dropped.
    """
    [(x, y)] = batches
    loss = (model(x) - y).square().mean()
    loss.backward()
    for unit in reversed(units):
        unit.reduce_gradients()
        unit.free()
    with torch.no_grad():
        for shard in (unit.shard for unit in units):
            if shard.grad is not None:
                shard -= lr * shard.grad
            shard.grad = None
    return [loss.item()]


def train_in_subgroup_on_rank(unit_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                              batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float,
                              ranks: Sequence[int]) -> dict[str, Any] | None:
    """Every rank creates ``new_group(ranks)``; its members train through ``unit_cls(m, group=group)``.

    The members share each batch (rows by group rank) and step with :func:`step_shards_by_hand`,
    one batch per call; the other ranks return ``None`` at once.
    """
    return in_subgroup(ranks, lambda group: param_sharding.shard_train_on_rank(
        unit_cls, step_shards_by_hand, model_fn, batches, lr, group=group))


class RecordingUnit:
    """Stands in for a unit when the hidden check trains the student's ``train_full_shard``: not a sharded unit.

    Every rank keeps the module's whole flat parameter vector as ``shard`` (no sharding, no
    padding, no all-gather); the module's parameters are views of it, pointed at it again
    before every forward and by ``free()`` and ``gather()``. ``reduce_gradients()`` all-reduces
    the flat gradient, stores the mean as ``shard.grad`` and clears the module's gradients.
    Every forward and backward through the module and every call of ``gather``, ``free`` and
    ``reduce_gradients`` is appended to the shared ``log`` as ``[event, unit index, shard
    version, shard values]``, so the grader can tell the order of the loop's calls and when
    the shards changed.
    """

    def __init__(self, module: nn.Module, index: int, log: list[list[Any]]) -> None:
        self.module, self.index, self.log = module, index, log
        self.params = list(module.parameters())
        self.shard = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in self.params]))
        self._view()
        module.register_forward_pre_hook(self._before_forward)
        module.register_forward_hook(self._after_forward)

    def note(self, event: str) -> None:
        self.log.append([event, self.index, self.shard._version, self.shard.detach().clone()])

    def _view(self) -> None:
        offset = 0
        for p in self.params:
            p.data = self.shard.data[offset: offset + p.numel()].view_as(p)
            offset += p.numel()

    def _before_forward(self, module: nn.Module, args: Any) -> None:
        self.note("forward")
        self._view()

    def _after_forward(self, module: nn.Module, args: Any, out: Any) -> None:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda grad: self.note("backward"))

    def gather(self) -> None:
        self.note("gather")
        self._view()

    def free(self) -> None:
        self.note("free")
        self._view()

    def reduce_gradients(self) -> None:
        self.note("reduce_gradients")
        flat = torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).reshape(-1) for p in self.params])
        dist.all_reduce(flat)
        self.shard.grad = flat / dist.get_world_size()
        for p in self.params:
            p.grad = None


def recorded_train_on_rank(train_fn: Callable[..., list[float]], model_fn: Callable[[], nn.Module],
                           batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float,
                           batches_per_call: int) -> dict[str, Any]:
    """``train_fn(model, units, batches, lr)`` with a :class:`RecordingUnit` on every Linear of ``model_fn()``.

    ``train_fn`` gets ``batches_per_call`` consecutive batches per call (this rank's rows of
    each); after every call each unit notes ``"return"``. Returns the final parameters, the
    losses and the log.
    """
    model = model_fn()
    log: list[list[Any]] = []
    units = [RecordingUnit(m, u, log) for u, m in enumerate(model[::2])]
    losses: list[Any] = []
    for start in range(0, len(batches), batches_per_call):
        losses += train_fn(model, units, [rank_shard(x, y) for x, y in batches[start:start + batches_per_call]], lr)
        for unit in units:
            unit.note("return")
    return {"final": state_of(model), "losses": losses, "log": log}


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
