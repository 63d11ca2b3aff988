"""Lesson 04, accumulation: the references, the hidden cases and the hidden checks (private to the grader).

:func:`reference_training` is single-process float64 training with one update per whole
window; :func:`window_allreduce_cost` is the answer of the cost exercise. The hidden checks
copy what a student's code returned into plain data (:mod:`autograder.plain`) before
comparing it, then raise the student-facing messages of :mod:`helpers.l04_accumulation`.

Units: sizes are rows (samples); communication is in bytes sent by one rank under a ring.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from autograder.lessons.costs import ring_allreduce_bytes
from autograder.plain import plain
from helpers import l04_accumulation as acc
from helpers.runtime.cluster import run
from helpers.shared.models import TinyMLP
from helpers.shared.state import SameInit, state_of, to_float64, uneven_mlp

TIMEOUT_S = 10.0  # per distributed call of a hidden test
# The model and optimizers of the assignment's test cells.
MLP = SameInit(TinyMLP, seed=5)
ADAM = acc.OptimizerSpec("adam", {"lr": 0.05})
SGD = acc.OptimizerSpec("sgd", {"lr": 0.2, "momentum": 0.9})


# --------------------------------------------------------------------------- references


def _concatenated(window: acc.Window) -> acc.MicroBatch:
    xs = [x for per_rank in window for x, _ in per_rank]
    ys = [y for per_rank in window for _, y in per_rank]
    return torch.cat(xs), torch.cat(ys)


def reference_training(
    model: nn.Module, windows: Sequence[acc.Window], spec: acc.OptimizerSpec, max_norm: float,
    skip: Iterable[int] = (),
) -> dict[str, Any]:
    """Single-process float64 training: one update per whole window, windows in ``skip`` skipped.

    Per window: forward on the concatenated window, ``mse_loss`` (the window loss),
    backward, ``clip_grad_norm_(max_norm)``, optimizer step, ``zero_grad``. Returns the
    final ``state``, the optimizer ``opt_state`` (see :func:`helpers.l04_accumulation.optimizer_state_of`),
    the window ``losses`` and the ``clip`` coefficients (min(1, max_norm/norm); nan when skipped).
    ``model`` is not modified.
    """
    ref = to_float64(model)
    opt = spec.build(ref.parameters())
    skip = set(skip)
    losses, clips = [], []
    for w, window in enumerate(windows):
        x, y = _concatenated(window)
        loss = nn.functional.mse_loss(ref(x.double()), y.double())
        losses.append(loss.item())
        if w in skip:
            clips.append(math.nan)
            continue
        loss.backward()
        norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm))
        clips.append(min(1.0, max_norm / norm) if norm > 0 else 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {"state": state_of(ref), "opt_state": acc.optimizer_state_of(opt, ref), "losses": losses,
            "clip": clips}


def window_allreduce_cost(
    num_params: int, bytes_per_element: int, world_size: int, micro_batches: int, *,
    no_sync: bool, num_buckets: int = 1,
) -> tuple[int, float]:
    """Gradient all-reduces per window and ring bytes each rank sends for them.

    With ``no_sync`` on the first K-1 micro-batches the gradient is reduced once per window;
    without it, once per micro-batch. Each reduction issues ``num_buckets`` all-reduces whose
    bytes add up to one ring all-reduce of the whole gradient, 2(N-1)/N * M bytes.
    """
    syncs = 1 if no_sync else micro_batches
    return syncs * num_buckets, syncs * ring_allreduce_bytes(num_params, bytes_per_element, world_size)


# --------------------------------------------------------------------------- hidden checks


def check_found_inf(per_rank: Sequence[Any], expected: bool, case: str) -> None:
    """Every rank's ``found_inf_global`` answer is the plain bool ``expected`` (gradients untouched)."""
    results = [r for r in plain(list(per_rank), "found_inf_global's results") if r is not None]
    acc.assert_found_inf(results, expected, case)


def check_windows(per_rank: Sequence[Any], expected: dict[str, Any], num_micro_batches: int, case: str) -> None:
    """``train_window`` trained like ``expected``, every group member reporting the same window losses
    (``None`` losses in ``expected``, skipped windows, are not compared)."""
    outs = plain(list(per_rank), "train_window's results")
    acc.assert_windows_match(outs, expected, num_micro_batches, case)
    losses = [[loss for loss, _ in o["results"]] for o in outs if o is not None]
    compared = [w for w, loss in enumerate(expected["losses"]) if loss is not None]
    for member, theirs in enumerate(losses[1:], start=1):
        if not all(type(theirs[w]) is float and math.isclose(theirs[w], losses[0][w], rel_tol=1e-9)
                   for w in compared):
            raise AssertionError(
                f"[{case}] group member {member} reported window losses {theirs}, member 0 {losses[0]}: "
                f"window_loss must be the same on every rank. Sum the loss over the group with an "
                f"all-reduce; a reduce leaves the full sum on one rank only.")


def check_skipped_together(per_rank: Sequence[Any], expected_steps: Sequence[bool], case: str) -> None:
    """Every rank reported the step/skip pattern ``expected_steps`` as plain bools."""
    acc.assert_skipped_together(plain(list(per_rank), "train_window's results"), expected_steps, case)


@dataclass(frozen=True)
class TrainCase:
    """A hidden ``train_window`` case: ``sizes[member][k]`` rows, one window per seed.

    ``poison`` maps a window to the ``(member, k)`` micro-batch that gets an ``inf`` in its
    input; a ``loss_scale`` above float32's largest value overflows every scaled gradient.
    Either makes the window a skipped one.
    """

    world_size: int
    model_fn: SameInit
    sizes: list[list[int]]
    spec: acc.OptimizerSpec
    max_norm: float
    seeds: tuple[int, ...]
    loss_scale: float | None = None
    poison: dict[int, tuple[int, int]] = field(default_factory=dict)
    group_ranks: list[int] | None = None

    @property
    def members(self) -> list[int]:
        return list(range(self.world_size)) if self.group_ranks is None else list(self.group_ranks)

    def windows(self) -> list[acc.Window]:
        return [acc.make_window(self.sizes, seed=s, poison=self.poison.get(w), **self.features)
                for w, s in enumerate(self.seeds)]

    @property
    def features(self) -> dict[str, int]:
        model = self.model_fn()
        return {"in_features": _first_linear(model).in_features, "out_features": _last_linear(model).out_features}

    def skipped(self) -> list[int]:
        if self.loss_scale is not None and self.loss_scale > torch.finfo(torch.float32).max:
            return list(range(len(self.seeds)))
        return sorted(self.poison)


def _first_linear(model: nn.Module) -> nn.Linear:
    return next(m for m in model.modules() if isinstance(m, nn.Linear))


def _last_linear(model: nn.Module) -> nn.Linear:
    return [m for m in model.modules() if isinstance(m, nn.Linear)][-1]


_UNEVEN = SameInit(uneven_mlp, seed=7, kwargs={"in_features": 8, "out_features": 4})
_WIDE = SameInit(TinyMLP, seed=13, kwargs={"in_features": 6, "hidden": 10, "out_features": 3})
_ADAM_B = acc.OptimizerSpec("adam", {"lr": 0.02, "betas": (0.8, 0.95)})
OVERFLOW_SCALE = 2.0 ** 140  # float32 cannot hold it: every scaled gradient overflows
TRAIN_CASES: dict[str, TrainCase] = {c_name: c for c_name, c in [
    # test_train_window_objective: the update of the whole window's objective
    ("3 ranks, K=4, SGD", TrainCase(3, MLP, [[1, 5, 2, 3], [4, 1, 1, 2], [2, 3, 6, 1]], SGD, math.inf, (44, 45, 46))),
    ("3 ranks, K=2, uneven MLP with a frozen layer, Adam",
     TrainCase(3, _UNEVEN, [[1, 6], [3, 2], [5, 1]], _ADAM_B, math.inf, (42, 43, 44))),
    ("group [1, 2] of 3 ranks, K=3, SGD",
     TrainCase(3, MLP, [[3, 5, 2], [6, 1, 2]], SGD, math.inf, (47, 48, 49), group_ranks=[1, 2])),
    ("4 ranks, K=1, Adam", TrainCase(4, MLP, [[3], [1], [4], [2]], ADAM, math.inf, (50, 51))),
    # test_train_window_communication: correct, within the budget, one micro-batch per forward
    ("3 ranks, K=3, clipped", TrainCase(3, MLP, [[1, 2, 3], [2, 3, 1], [3, 1, 2]], SGD, 1.0, (60, 61, 62))),
    ("2 ranks, K=5, scaled", TrainCase(2, MLP, [[1, 2, 3, 1, 2], [2, 3, 1, 2, 3]], ADAM, 0.5, (63, 64),
                                      loss_scale=1024.0)),
    ("4 ranks, K=4, TinyMLP 6-10-3", TrainCase(4, _WIDE, [[2, 1, 1, 3], [1, 1, 2, 2], [3, 2, 1, 1], [1, 4, 1, 1]],
                                               SGD, 0.3, (65, 66))),
    ("group [0, 2] of 3 ranks, K=3, uneven MLP",
     TrainCase(3, _UNEVEN, [[2, 1, 4], [1, 3, 2]], _ADAM_B, 1.0, (67, 68), group_ranks=[0, 2])),
    # test_train_window_scaling_and_clipping
    ("3 ranks, K=4, loss_scale 4096, clipping binds",
     TrainCase(3, MLP, [[3, 1, 2, 2], [1, 1, 5, 2], [2, 4, 1, 1]], SGD, 0.15, (83, 84, 85), loss_scale=4096.0)),
    ("3 ranks, K=2, loss_scale 256, clipping binds",
     TrainCase(3, MLP, [[1, 2], [4, 1], [2, 3]], SGD, 0.1, (86, 87, 88), loss_scale=256.0)),
    ("4 ranks, K=2, loss_scale 2048, no clipping",
     TrainCase(4, MLP, [[2, 3], [1, 4], [3, 1], [2, 2]], SGD, math.inf, (89, 90, 91), loss_scale=2048.0)),
    ("3 ranks, K=3, loss_scale 512, clipping binds in some windows only",
     TrainCase(3, MLP, [[2, 2, 1], [1, 3, 2], [4, 1, 1]], SGD, 0.8, (92, 93, 94, 95), loss_scale=512.0)),
    # test_train_window_skips_together
    ("3 ranks, inf in rank 2's micro-batch 1 of window 1, Adam, scaled",
     TrainCase(3, MLP, [[1, 2, 3], [3, 1, 1], [2, 2, 4]], ADAM, 1.0, (100, 101, 102), loss_scale=512.0,
               poison={1: (2, 1)})),
    ("4 ranks, inf in rank 0's last micro-batch of window 0, SGD",
     TrainCase(4, MLP, [[2, 1], [1, 3], [3, 1], [1, 1]], SGD, 1.0, (120, 121), poison={0: (0, 1)})),
    ("3 ranks, loss_scale 2**140: every scaled gradient overflows",
     TrainCase(3, MLP, [[1, 2], [2, 1], [1, 1]], ADAM, 1.0, (122, 123), loss_scale=OVERFLOW_SCALE)),
    ("group [1, 2] of 3 ranks, inf in member 0's micro-batch 0 of window 0",
     TrainCase(3, MLP, [[2, 1, 2], [1, 3, 1]], SGD, 0.5, (124, 125), poison={0: (0, 0)}, group_ranks=[1, 2])),
]}


OBJECTIVE_CASES = list(TRAIN_CASES)[:4]       # hidden cases of test_train_window_objective
COMMUNICATION_CASES = list(TRAIN_CASES)[4:8]  # ... of test_train_window_communication (with the budget)
SCALING_CASES = list(TRAIN_CASES)[8:12]       # ... of test_train_window_scaling_and_clipping
SKIP_CASES = list(TRAIN_CASES)[12:]           # ... of test_train_window_skips_together


def expected_training(case: TrainCase) -> dict[str, Any]:
    """:func:`reference_training` of ``case``, the losses of skipped windows set to ``None``."""
    skipped = case.skipped()
    expected = reference_training(case.model_fn(), case.windows(), case.spec, case.max_norm, skip=skipped)
    expected["losses"] = [None if w in skipped else loss for w, loss in enumerate(expected["losses"])]
    return expected


def check_train_window(train_window: Callable[..., Any], name: str, *, budget: bool = False) -> None:
    """Case ``name`` of :data:`TRAIN_CASES`: every member steps or skips as the reference does, and trains
    like it; with ``budget``, also within the communication budget and one micro-batch per forward."""
    case = TRAIN_CASES[name]
    out, ledger = run(acc.train_windows_on_rank, train_window, case.model_fn, case.windows(), case.spec,
                      case.max_norm, loss_scale=case.loss_scale, group_ranks=case.group_ranks,
                      world_size=case.world_size, timeout=TIMEOUT_S, ledger=True)
    out = plain(out, "train_window's results")
    outside = [r for r in range(case.world_size) if r not in case.members]
    assert all(out[r] is None for r in outside), f"[{name}] ranks {outside} are outside the group"
    members = [out[r] for r in case.members]
    skipped = case.skipped()
    steps = [w not in skipped for w in range(len(case.seeds))]
    if skipped:  # a wrong skip decision says more than the parameters it leads to
        check_skipped_together(members, steps, name)
    check_windows(members, expected_training(case), len(case.sizes[0]), name)
    check_skipped_together(members, steps, name)
    if budget:
        grad_numel = sum(p.numel() for p in case.model_fn().parameters() if p.requires_grad)
        acc.assert_window_budget(ledger, case.members, grad_numel, len(case.seeds), len(case.sizes[0]), name)
        acc.assert_one_micro_batch_per_forward(members, case.sizes, name)


def check_window_cost(fn: Callable[..., Any], cases: Sequence[acc.CostCase]) -> None:
    """``fn`` returns plain numbers equal to :func:`window_allreduce_cost` on every case."""
    def plain_fn(*args: Any, **kwargs: Any) -> Any:
        return plain(fn(*args, **kwargs), "window_allreduce_cost's result")

    acc.assert_window_cost(plain_fn, [(case, window_allreduce_cost(*case[:4], no_sync=case[4], num_buckets=case[5]))
                                      for case in cases])
