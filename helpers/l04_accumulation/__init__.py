"""Lesson 04: gradient accumulation windows, loss scaling and a global inf/nan decision.

Vocabulary used by the chapter, the assignment and the hidden tests:

* a **micro-batch** is a regression pair ``(x, y)``: ``x`` is ``[rows, in_features]``,
  ``y`` is ``[rows, out_features]`` (float32); different micro-batches have different
  numbers of rows;
* an **accumulation window** is ``window[rank][k]``: the ``K`` micro-batches every rank
  processes before the one optimizer update (``K`` is the same on every rank);
* the **window loss** is the mean squared error over *every* element of *every* sample of
  the window on *all* ranks, i.e. ``F.mse_loss`` of the concatenated window:
  ``L = 1/(S*D) * sum ||f(x_i) - y_i||^2`` with ``S`` samples in the window (all ranks) and
  ``D`` output features.

Drivers named ``*_on_rank`` run inside :func:`helpers.runtime.cluster.run` with the student's
function; ``assert_*`` checks run in the notebook and raise :class:`AssertionError` with a
message that names the likely mistake. Communication is counted from the cluster's ledger,
which sees DDP's gradient all-reduces only through a Python comm hook
(:func:`register_ledger_hook`). The expected values of the visible tests and the numbers of
the chapter's figure and explorer are results stored with the course
(:func:`stored_reference`, :func:`stored_window_cost`); the references that compute them
live on the instructor's side (``autograder.lessons.l04``).

Units: sizes are rows (samples); communication is in bytes sent by one rank under a ring.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from torch import nn

from helpers.shared.data import tensors_from_json
from helpers.runtime.ledger import CollectiveRecord, Ledger
from helpers.shared.state import SameInit, state_of
from helpers.shared.stored import load

MicroBatch = tuple[torch.Tensor, torch.Tensor]
Window = list[list[MicroBatch]]  # window[rank][k]
State = dict[str, torch.Tensor]
CostCase = tuple[int, int, int, int, bool, int]  # num_params, bytes_per_element, world_size, K, no_sync, buckets

STORED_REFERENCES = "04_visible_references"
STORED_COSTS = "04_window_costs"
# The explorer's slider values (parameters, gradient bytes per element, ranks, micro-batches per window).
EXPLORER_PARAMS = (124_000_000, 350_000_000, 1_300_000_000, 7_000_000_000, 13_000_000_000,
                   70_000_000_000, 175_000_000_000)
EXPLORER_BYTES = (4, 2)
EXPLORER_WORLD_SIZES = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
EXPLORER_MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
# The communication budget of one train_window call, per rank: collectives, and float32 elements
# beyond the gradient's that one all-reduce may carry (counts, losses, flags).
MAX_WINDOW_COLLECTIVES = 2
EXTRA_ELEMENTS = 16

__all__ = [
    "MicroBatch", "Window", "OptimizerSpec", "make_window", "optimizer_state_of", "register_ledger_hook",
    "InfAfterReduce", "train_windows_on_rank", "found_inf_on_rank", "gradient_allreduces", "window_collectives",
    "window_budget_bytes", "assert_found_inf", "assert_windows_match", "assert_window_budget",
    "assert_one_micro_batch_per_forward", "assert_skipped_together",
    "assert_window_cost", "stored_reference", "stored_window_cost",
    "plot_window_communication", "accumulation_explorer",
]


# --------------------------------------------------------------------------- data


def make_window(
    sizes: Sequence[Sequence[int]], in_features: int = 8, out_features: int = 4, seed: int = 0,
    poison: tuple[int, int] | None = None,
) -> Window:
    """A deterministic window: ``window[rank][k]`` has ``sizes[rank][k]`` rows (>= 1).

    Every rank has the same number of micro-batches ``K = len(sizes[rank])``. ``poison=(rank, k)``
    puts an ``inf`` into the first input element of that micro-batch (an overflow in the data).
    """
    if len({len(s) for s in sizes}) != 1:
        raise ValueError(f"every rank needs the same number of micro-batches, got {sizes}")
    if any(n < 1 for s in sizes for n in s):
        raise ValueError(f"every micro-batch needs at least one row, got {sizes}")
    g = torch.Generator().manual_seed(seed)
    window: Window = []
    for per_rank in sizes:
        window.append([(torch.randn(n, in_features, generator=g), torch.randn(n, out_features, generator=g))
                       for n in per_rank])
    if poison is not None:
        rank, k = poison
        window[rank][k][0][0, 0] = math.inf
    return window


# --------------------------------------------------------------------------- optimizers


@dataclass(frozen=True)
class OptimizerSpec:
    """A picklable optimizer recipe: ``kind`` is ``"adam"`` or ``"sgd"``, ``kwargs`` its settings."""

    kind: str
    kwargs: dict[str, float] = field(default_factory=dict)

    def build(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        if self.kind == "adam":
            return torch.optim.Adam(params, **self.kwargs)
        if self.kind == "sgd":
            return torch.optim.SGD(params, **self.kwargs)
        raise ValueError(f"unknown optimizer kind {self.kind!r}")


def optimizer_state_of(optimizer: torch.optim.Optimizer, model: nn.Module) -> State:
    """Every optimizer state tensor, keyed ``"<param name>.<state key>"`` (e.g. ``fc1.weight.exp_avg``).

    Step counters become float64 scalars so that they compare like the other tensors.
    """
    out: State = {}
    for name, p in model.named_parameters():
        for key, value in optimizer.state.get(p, {}).items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            out[f"{name}.{key}"] = t.detach().clone().double() if key == "step" else t.detach().clone()
    return out


# --------------------------------------------------------------------------- comm hooks


def register_ledger_hook(ddp_model: nn.Module, hook_state: Any = None) -> None:
    """Route DDP's gradient all-reduces through ``dist.all_reduce`` so the ledger records them.

    With ``hook_state`` an :class:`InfAfterReduce`, the reduced bucket is corrupted on one
    rank (see there); otherwise this is PyTorch's ``allreduce_hook``.
    """
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    if hook_state is None:
        ddp_model.register_comm_hook(ddp_model.process_group, allreduce_hook)  # state = the group to reduce over
    else:
        hook_state.group = ddp_model.process_group
        ddp_model.register_comm_hook(hook_state, _allreduce_then_corrupt)


@dataclass
class InfAfterReduce:
    """Comm-hook state: after the all-reduce, write ``inf`` into the bucket on ``rank`` only.

    Stands in for any non-finite gradient that the all-reduce does not spread: a gradient
    shard only one rank holds (ZeRO-2, FSDP), a parameter DDP ignores, a silent corruption.
    The driver sets ``armed`` for the windows that must overflow.
    """

    rank: int
    armed: bool = False
    group: Any = None  # DDP's process group, set when the hook is registered


def _allreduce_then_corrupt(state, bucket):  # no annotations: DDP checks them and ours are strings
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    fut = allreduce_hook(state.group, bucket)
    if not (state.armed and dist.get_rank() == state.rank):
        return fut

    def corrupt(f: torch.futures.Future) -> torch.Tensor:
        reduced = f.value()
        reduced[0] = math.inf
        return reduced

    return fut.then(corrupt)


# --------------------------------------------------------------------------- rank-side drivers


def train_windows_on_rank(
    train_window: Callable[..., Any],
    model_fn: SameInit,
    windows: Sequence[Window],
    spec: OptimizerSpec,
    max_norm: float,
    loss_scale: float | None = None,
    group_ranks: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Wrap ``model_fn()`` in DDP with a ledger-visible comm hook and call ``train_window`` per window.

    With ``group_ranks`` DDP and the call use ``dist.new_group(group_ranks)``; other ranks
    return ``None``. A ``dist.barrier`` over the group before the first window and after each
    one marks the windows in the ledger (:func:`window_collectives`). A forward pre-hook on the
    model records the rows of every forward pass. Returns per-window ``results``
    ``(loss, stepped)``, the final ``state``, ``opt_state``, whether every ``.grad`` was cleared
    after each window (``grads_cleared``) and the rows of each window's forward passes
    (``forward_rows``).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    group = dist.new_group(list(group_ranks)) if group_ranks is not None else None
    if group_ranks is not None and dist.get_rank() not in group_ranks:
        return None
    model = model_fn()
    ddp = DDP(model, process_group=group)
    register_ledger_hook(ddp)
    rows: list[int] = []
    model.register_forward_pre_hook(lambda _module, args: rows.append(int(args[0].shape[0]) if args else -1))
    opt = spec.build(ddp.parameters())
    index = dist.get_rank() if group is None else dist.get_rank(group)
    results, cleared, forward_rows = [], [], []
    dist.barrier(group=group)
    for window in windows:
        rows.clear()
        out = train_window(ddp, opt, list(window[index]), max_norm=max_norm, loss_scale=loss_scale, group=group)
        dist.barrier(group=group)
        results.append(_as_result(out))
        cleared.append(all(p.grad is None or not p.grad.any() for p in model.parameters()))
        forward_rows.append(list(rows))
    return {"results": results, "state": state_of(model), "opt_state": optimizer_state_of(opt, model),
            "grads_cleared": cleared, "forward_rows": forward_rows}


def _as_result(out: Any) -> tuple[Any, Any]:
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError(f"train_window must return (window_loss, step_taken), got {out!r}")
    loss, stepped = out
    if torch.is_tensor(loss):
        loss = loss.detach().double().item() if loss.numel() == 1 else loss
    return loss, stepped


def found_inf_on_rank(
    found_inf_fn: Callable[..., Any], model_fn: SameInit, bad: dict[int, str], seed: int,
    group_ranks: Sequence[int] | None = None, huge: bool = False,
) -> tuple[Any, bool] | None:
    """Give every parameter a rank-dependent finite gradient, then poison some ranks.

    ``bad[rank]`` is ``"inf"``, ``"-inf"`` or ``"nan"``: that rank gets one such element in
    its last gradient. The first parameter keeps ``grad=None``. With ``huge`` every finite
    element lies between half of float32's largest value and that value (positive), so a
    sum or a 2-norm of two of them overflows to ``inf`` although no element is non-finite.
    Calls ``found_inf_fn(model.parameters(), group)`` and returns (its result, gradients untouched).
    """
    group = dist.new_group(list(group_ranks)) if group_ranks is not None else None
    if group_ranks is not None and dist.get_rank() not in group_ranks:
        return None
    rank = dist.get_rank()
    model = model_fn()
    params = list(model.parameters())
    g = torch.Generator().manual_seed(seed + rank)
    for p in params[1:]:
        if huge:
            p.grad = (torch.rand(p.shape, generator=g) + 1) * (torch.finfo(torch.float32).max / 2)
        else:
            p.grad = torch.randn(p.shape, generator=g) * 1e3
    if rank in bad:
        params[-1].grad.view(-1)[-1] = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}[bad[rank]]
    before = [None if p.grad is None else p.grad.clone() for p in params]
    result = found_inf_fn(model.parameters(), group)
    untouched = all(_same_gradient(b, p.grad) for b, p in zip(before, params))
    return result, untouched


def _same_gradient(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Equal including positions of nan (torch.equal says nan != nan)."""
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


# --------------------------------------------------------------------------- communication


def gradient_allreduces(ledger: Ledger, grad_numel: int, rank: int = 0) -> list[float]:
    """Ring bytes of every all-reduce on ``rank`` that carries gradient-bucket-sized data.

    DDP's buckets are flat; a tiny model fits into one bucket of ``grad_numel`` elements,
    so these are exactly the gradient synchronisations. Scalars (counts, losses, flags) are
    not included.
    """
    return [r.ring_bytes for r in ledger.records[rank] if r.op == "all_reduce" and r.numel == grad_numel]


# --------------------------------------------------------------------------- checks


def assert_found_inf(results: Sequence[Any], expected: bool, case: str) -> None:
    """Every rank returned the same Python bool ``expected`` and left the gradients alone."""
    answers = [r for r, _ in results]
    for rank, (answer, untouched) in enumerate(results):
        if type(answer) is not bool:
            raise AssertionError(f"[{case}] rank {rank} returned {answer!r} ({type(answer).__name__}); "
                                 f"return a Python bool, e.g. bool(flag.item()).")
        if not untouched:
            raise AssertionError(f"[{case}] rank {rank}: found_inf_global modified the gradients; "
                                 f"it must only inspect them.")
    if len(set(answers)) != 1:
        raise AssertionError(
            f"[{case}] ranks disagree: {answers} (index = rank). Only some ranks hold the non-finite "
            f"value, so a local check answers differently on different ranks; every rank must skip "
            f"the step together. Combine the local flags with an all-reduce (MAX or SUM) over `group`.")
    if answers[0] is not expected:
        hint = (" Check every gradient for inf, -inf AND nan (torch.isfinite)." if expected
                else " A finite gradient (even a large one) is not an overflow.")
        raise AssertionError(f"[{case}] every rank returned {answers[0]}, expected {expected}.{hint}")


def _max_diff(a: State, b: State) -> str | None:
    for name in b:
        if name not in a:
            return f"{name!r} is missing"
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            return f"{name!r} has shape {tuple(x.shape)}, expected {tuple(y.shape)}"
        if not torch.allclose(x, y, atol=1e-5, rtol=1e-4):
            return f"{name!r}: max |diff| {float((x - y).abs().max()):.3g}"
    extra = sorted(set(a) - set(b))
    return f"unexpected entries {extra}" if extra else None


def assert_windows_match(
    per_rank: Sequence[dict[str, Any] | None], expected: dict[str, Any], num_micro_batches: int, case: str,
) -> None:
    """Replicas identical, and parameters, optimizer state and window losses match the reference.

    An expected loss of ``None`` (a skipped window) is not compared.
    """
    outs = [o for o in per_rank if o is not None]
    first = outs[0]
    for k, o in enumerate(outs[1:], start=1):
        if [s for _, s in o["results"]] != [s for _, s in first["results"]]:
            raise AssertionError(f"[{case}] ranks disagree on which windows took a step: "
                                 f"{[[s for _, s in q['results']] for q in outs]}.")
        for name in first["state"]:
            if not torch.equal(o["state"][name], first["state"][name]):
                raise AssertionError(f"[{case}] the replicas diverged: {name!r} differs between ranks "
                                     f"(member {k} of the group vs member 0).")
    for w, cleared in enumerate(first["grads_cleared"]):
        if not cleared:
            raise AssertionError(f"[{case}] after window {w} some .grad is still non-zero: call "
                                 f"optimizer.zero_grad() at the end of every window (also a skipped one).")
    steps = [v for n, v in first["opt_state"].items() if n.endswith(".step")]
    exp_steps = [v for n, v in expected["opt_state"].items() if n.endswith(".step")]
    if steps and exp_steps and float(steps[0]) != float(exp_steps[0]):
        hint = (" That is one step per micro-batch: call optimizer.step() once, after the last micro-batch."
                if float(steps[0]) == num_micro_batches * float(exp_steps[0]) else "")
        raise AssertionError(f"[{case}] the optimizer took {float(steps[0]):g} steps, expected "
                             f"{float(exp_steps[0]):g} (one per window).{hint}")
    wrong_losses = []
    for w, ((loss, stepped), exp_loss) in enumerate(zip(first["results"], expected["losses"])):
        if type(stepped) is not bool:
            raise AssertionError(f"[{case}] window {w}: step_taken is {stepped!r}; return a Python bool.")
        if exp_loss is None:  # a skipped window: its loss is not compared
            continue
        if not (isinstance(loss, float) and math.isclose(loss, exp_loss, rel_tol=1e-4, abs_tol=1e-6)):
            wrong_losses.append(
                f"[{case}] window {w}: window loss {loss!r}, expected {exp_loss:.6g} (mean squared error "
                f"over every sample of the window on all ranks, unscaled, a Python float). A mean of "
                f"per-micro-batch means weights small micro-batches too much; divide the summed loss by "
                f"the window's samples.")
    if wrong_losses and wrong_losses[0].startswith(f"[{case}] window 0:"):
        raise AssertionError(wrong_losses[0])  # later losses also depend on the earlier updates
    diff = _max_diff(first["state"], expected["state"])
    if diff is not None:
        raise AssertionError(
            f"[{case}] parameters after training differ from the single-process float64 reference "
            f"(one update per whole window): {diff}. The window gradient is the gradient of the summed "
            f"squared errors of all ranks divided by S*D (S samples of the whole window, not K and not "
            f"this rank's count; DDP's all-reduce averages over N ranks), accumulated over every "
            f"micro-batch (no zero_grad inside the window); it is clipped once, by its global norm, after "
            f"dividing out loss_scale.")
    if wrong_losses:
        raise AssertionError(wrong_losses[0])
    diff = _max_diff(first["opt_state"], expected["opt_state"])
    if diff is not None:
        raise AssertionError(f"[{case}] optimizer state differs from the reference: {diff}.")


def window_collectives(ledger: Ledger, rank: int) -> list[list[CollectiveRecord]]:
    """The collectives ``rank`` issued inside each window (:func:`train_windows_on_rank`'s barriers mark them).

    Records before the first barrier (building DDP) are dropped; a barrier the step issued
    itself splits a window, so the result then has more windows than were trained.
    """
    windows: list[list[CollectiveRecord]] = []
    for record in ledger.records[rank]:
        if record.op == "barrier":
            windows.append([])
        elif windows:
            windows[-1].append(record)
    return windows[:-1]


def window_budget_bytes(grad_numel: int, world_size: int) -> float:
    """Ring bytes one rank may send per window: one float32 all-reduce of the gradient plus ``EXTRA_ELEMENTS``."""
    return 2 * (world_size - 1) / world_size * 4 * (grad_numel + EXTRA_ELEMENTS)


def assert_window_budget(ledger: Ledger, members: Sequence[int], grad_numel: int, num_windows: int,
                         micro_batches: int, case: str) -> None:
    """Every window costs each group member at most ``MAX_WINDOW_COLLECTIVES`` collectives and
    :func:`window_budget_bytes` ring bytes (the gradient moves once)."""
    budget = window_budget_bytes(grad_numel, len(members))
    for rank in members:
        windows = window_collectives(ledger, rank)
        if len(windows) != num_windows:
            raise AssertionError(f"[{case}] rank {rank}: the ledger shows {len(windows)} windows for {num_windows}: "
                                 f"your step called dist.barrier, a collective the budget counts; it needs none.")
        for w, records in enumerate(windows):
            sent = sum(r.ring_bytes for r in records)
            if len(records) <= MAX_WINDOW_COLLECTIVES and sent <= budget + 1e-9:
                continue
            calls = ", ".join(r.describe() for r in records)
            big = sum(1 for r in records if r.numel >= grad_numel)
            hint = (f" {big} of them carry the gradient: with no_sync on every micro-batch but the last the "
                    f"gradient is reduced once per window ({micro_batches}x less traffic)." if big > 1 else
                    " Every quantity the step needs from the other ranks can travel in one collective "
                    "after the backward passes (the global denominator is a constant you may apply after "
                    "the reduction), or in the gradient's own.")
            raise AssertionError(
                f"[{case}] rank {rank}, window {w}: {len(records)} collectives ({calls}), {sent:,.0f} ring bytes; "
                f"the budget is {MAX_WINDOW_COLLECTIVES} collectives and {budget:,.0f} bytes (one float32 "
                f"all-reduce of the {grad_numel}-element gradient plus {EXTRA_ELEMENTS} elements).{hint}")


def assert_one_micro_batch_per_forward(per_rank: Sequence[dict[str, Any] | None], window_sizes: Sequence[Sequence[int]],
                                       case: str) -> None:
    """No forward pass of any window saw more rows than the largest micro-batch of that rank's window."""
    for member, out in enumerate(o for o in per_rank if o is not None):
        largest = max(window_sizes[member])
        for w, rows in enumerate(out["forward_rows"]):
            if rows and max(rows) > largest:
                raise AssertionError(
                    f"[{case}] group member {member}, window {w}: a forward pass saw {max(rows)} rows, but the "
                    f"largest micro-batch has {largest}. The window does not fit in memory at once: run each "
                    f"micro-batch through its own forward and backward and let the gradients accumulate.")


def assert_skipped_together(per_rank: Sequence[dict[str, Any] | None], expected_steps: Sequence[bool],
                            case: str) -> None:
    """Every rank reports the expected step/skip pattern and the replicas are still identical."""
    outs = [o for o in per_rank if o is not None]
    for k, o in enumerate(outs):
        got = [s for _, s in o["results"]]
        if got != list(expected_steps):
            raise AssertionError(
                f"[{case}] group member {k} reported step_taken={got}, expected {list(expected_steps)} "
                f"(all members: {[[s for _, s in q['results']] for q in outs]}). A non-finite value on ONE "
                f"rank must make EVERY rank skip, so decide on something every rank holds: a flag reduced "
                f"over the group, or the reduced gradient itself (a sum with inf or nan in it is not "
                f"finite). This rank's own loss or its gradient before the reduction is not enough.")
    for k, o in enumerate(outs[1:], start=1):
        for name in outs[0]["state"]:
            if not torch.equal(o["state"][name], outs[0]["state"][name]):
                raise AssertionError(f"[{case}] replicas diverged after the skipped window ({name!r}).")


def assert_window_cost(fn: Callable[..., Any], cases: Sequence[tuple[CostCase, tuple[int, float]]]) -> None:
    """``fn(n, b, w, k, no_sync=..., num_buckets=...)`` returns the expected ``(all_reduces, bytes)`` of every case."""
    for (n, b, w, k, no_sync, buckets), exp in cases:
        got = fn(n, b, w, k, no_sync=no_sync, num_buckets=buckets)
        ok = (isinstance(got, tuple) and len(got) == 2 and got[0] == exp[0]
              and math.isclose(float(got[1]), exp[1], rel_tol=1e-9, abs_tol=1e-9))
        if not ok:
            raise AssertionError(
                f"window_allreduce_cost({n}, {b}, {w}, {k}, no_sync={no_sync}, num_buckets={buckets}) "
                f"returned {got!r}, expected {exp!r} (all-reduces, bytes per rank).")


# --------------------------------------------------------------------------- results stored with the course


def stored_reference(case: str) -> dict[str, Any]:
    """A visible test's expected training result, stored with the course.

    Single-process float64 training with one update per whole window (computed on the
    instructor's side): the final ``state`` and ``opt_state`` (tensors) and the window
    ``losses``, in the form :func:`assert_windows_match` takes.
    """
    cases = load(STORED_REFERENCES)
    if case not in cases:
        raise KeyError(f"no stored reference {case!r}; stored: {sorted(cases)}")
    stored = cases[case]
    return {"state": tensors_from_json(stored["state"]), "opt_state": tensors_from_json(stored["opt_state"]),
            "losses": stored["losses"]}


def stored_window_cost(num_params: int, bytes_per_element: int, world_size: int, micro_batches: int, *,
                       no_sync: bool) -> tuple[int, float]:
    """Stored ``(gradient all-reduces, ring bytes per rank)`` of one window, gradient in one bucket.

    Stored are the explorer's grid (``EXPLORER_*`` values) and the chapter's measured
    TinyMLP cases; other arguments raise ``KeyError``.
    """
    key = f"{int(num_params)},{bytes_per_element},{world_size},{micro_batches}"
    table = load(STORED_COSTS)
    if key not in table:
        raise KeyError(f"no stored window cost for (num_params, bytes, world_size, K) = ({key}): stored are "
                       f"the explorer's slider values and the chapter's cases")
    count, sent = table[key]["no_sync" if no_sync else "every_micro_batch"]
    return count, sent


# --------------------------------------------------------------------------- figures and explorer


def plot_window_communication(
    micro_batches: Sequence[int],
    counted: dict[str, dict[str, Sequence[float]]],
    num_params: int,
    bytes_per_element: int,
    world_size: int,
    *,
    title: str = "Gradient communication per accumulation window",
) -> Figure:
    """All-reduces and ring bytes per window against K: the ledger (markers), the formula (lines).

    ``counted[label]`` holds ``"count"`` and ``"bytes"`` lists (per window, per rank) for each
    K in ``micro_batches``: the all-reduces the ledger counted, and the ring bytes it modelled for
    them (each call's counted elements priced by the ring formula, not traffic). Labels
    containing ``"no_sync"`` (but not ``"without"``) are compared with the formula with
    ``no_sync=True``. The formula's values are stored with the course (:func:`stored_window_cost`).
    """
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    ax_count, ax_bytes = fig.subplots(1, 2)
    colors = {True: "#2ca02c", False: "#d62728"}
    for label, data in counted.items():
        synced_once = "no_sync" in label and "without" not in label
        formula = [stored_window_cost(num_params, bytes_per_element, world_size, k, no_sync=synced_once)
                   for k in micro_batches]
        color = colors[synced_once]
        ax_count.plot(micro_batches, [c for c, _ in formula], color=color, lw=1.5, alpha=0.6)
        ax_count.plot(micro_batches, data["count"], "o", color=color, label=f"{label} (ledger count)")
        ax_bytes.plot(micro_batches, [b for _, b in formula], color=color, lw=1.5, alpha=0.6,
                      label=f"formula, {'1' if synced_once else 'K'} × 2(N−1)/N·M")
        ax_bytes.plot(micro_batches, data["bytes"], "o", color=color, label=f"{label} (ledger calls, ring-priced)")
    ax_count.set_xlabel("micro-batches per window K")
    ax_count.set_ylabel("gradient all-reduces per window")
    ax_count.set_title("all-reduces counted (rank 0)")
    ax_bytes.set_xlabel("micro-batches per window K")
    ax_bytes.set_ylabel("ring bytes per rank per window (B, modelled)")
    ax_bytes.set_title(f"ring bytes, modelled (M = {num_params * bytes_per_element} B, N = {world_size})")
    for ax in (ax_count, ax_bytes):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_xticks(list(micro_batches))
    fig.suptitle(title)
    return fig


def _size_label(num_params: int) -> str:
    """``1.3 B`` or ``124 M`` (parameters)."""
    return f"{num_params / 1e9:g} B" if num_params >= 1e9 else f"{num_params / 1e6:g} M"


def accumulation_explorer(
    num_params: int = 1_300_000_000, bytes_per_element: int = 2, world_size: int = 64, micro_batches: int = 8,
    bandwidth_gb_s: float = 25.0, compute_ms: float = 40.0,
):
    """Sliders: per-window all-reduce bytes and time with and without ``no_sync``.

    Parameters, gradient dtype, world size and K take the ``EXPLORER_*`` values, whose
    communication is stored with the course (:func:`stored_window_cost`). ``compute_ms`` is the
    forward+backward time of one micro-batch (ms); communication time is the ring bytes divided
    by the link bandwidth (GB/s, 1 GB = 1e9 B), without overlap. ``update()`` returns the numbers
    as a dict and redraws (works headless).
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    style, layout = {"description_width": "170px"}, W.Layout(width="520px")
    p = W.SelectionSlider(options=[(_size_label(n), n) for n in EXPLORER_PARAMS], value=int(num_params),
                          description="parameters", style=style, layout=layout, continuous_update=False)
    b = W.Dropdown(options=[("float32 (4 B)", 4), ("bf16 (2 B)", 2)], value=bytes_per_element,
                   description="gradient dtype", style=style, layout=layout)
    n = W.SelectionSlider(options=list(EXPLORER_WORLD_SIZES), value=world_size, description="world size N",
                          style=style, layout=layout, continuous_update=False)
    k = W.SelectionSlider(options=list(EXPLORER_MICRO_BATCHES), value=micro_batches, description="micro-batches K",
                          style=style, layout=layout, continuous_update=False)
    bw = W.FloatLogSlider(value=bandwidth_gb_s, base=10, min=-1, max=3, step=0.05, description="bandwidth (GB/s)",
                          style=style, layout=layout, continuous_update=False, readout_format=".3g")
    c = W.FloatLogSlider(value=compute_ms, base=10, min=0, max=3, step=0.05, description="compute / micro-batch (ms)",
                         style=style, layout=layout, continuous_update=False, readout_format=".3g")
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, float]:
        kk, nn_ = int(k.value), int(n.value)
        result: dict[str, float] = {"micro_batches": kk, "world_size": nn_}
        for sync in (True, False):
            count, sent = stored_window_cost(p.value, int(b.value), nn_, kk, no_sync=sync)
            key = "no_sync" if sync else "every_micro_batch"
            result[f"{key}_allreduces"] = count
            result[f"{key}_bytes"] = sent
            result[f"{key}_comm_s"] = sent / (bw.value * 1e9)
        result["compute_s"] = kk * c.value * 1e-3
        summary.value = (
            f"<b>with no_sync</b>: {result['no_sync_allreduces']} all-reduce, "
            f"{result['no_sync_bytes'] / 1e9:.3g} GB, {result['no_sync_comm_s'] * 1e3:.4g} ms per window<br>"
            f"<b>without</b>: {result['every_micro_batch_allreduces']} all-reduces, "
            f"{result['every_micro_batch_bytes'] / 1e9:.3g} GB, {result['every_micro_batch_comm_s'] * 1e3:.4g} ms "
            f"per window<br><b>compute</b>: {result['compute_s'] * 1e3:.4g} ms per window")
        fig = Figure(figsize=(6.5, 2.6), layout="constrained")
        ax = fig.add_subplot()
        labels = ["with no_sync", "every micro-batch"]
        comm = [result["no_sync_comm_s"] * 1e3, result["every_micro_batch_comm_s"] * 1e3]
        ax.barh(labels, [result["compute_s"] * 1e3] * 2, color="#1f77b4", label="compute")
        ax.barh(labels, comm, left=[result["compute_s"] * 1e3] * 2, color="#d62728", label="gradient all-reduce")
        ax.set_xlabel("time per window without overlap (ms)")
        ax.set_title(f"K = {kk} micro-batches, N = {nn_} ranks")
        ax.legend(fontsize=8, loc="lower right")
        show_figures(out, [fig], dpi=100)
        box.last_result = result
        return result

    for w in (p, b, n, k, bw, c):
        w.observe(update, names="value")
    box = W.VBox([p, b, n, k, bw, c, summary, out])
    box.controls = {"num_params": p, "bytes_per_element": b, "world_size": n, "micro_batches": k,
                    "bandwidth_gb_s": bw, "compute_ms": c}
    box.update = update
    update()
    return box
