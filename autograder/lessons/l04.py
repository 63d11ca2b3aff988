"""Instructor side of lesson 04 (accumulation): references, hidden checks, stored results.

:func:`reference_training` is single-process float64 training with one update per whole
window; :func:`window_allreduce_cost` is the answer of the cost exercise. The hidden checks
copy what a student's code returned into plain data (:mod:`autograder.plain`) before
comparing it, then raise the student-facing messages of :mod:`helpers.accumulation`.
``STORED`` produces the expected values of the visible tests and the communication numbers of
the chapter's figure and explorer.

Units: sizes are rows (samples); communication is in bytes sent by one rank under a ring.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
from torch import nn

from autograder.lessons.costs import ring_allreduce_bytes
from autograder.store import FLOAT32_RESULTS
from autograder.plain import plain
from helpers import accumulation as acc
from helpers.data import tensors_to_json
from helpers.models import TinyMLP
from helpers.reference import SameInit, state_of, to_float64

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE: frozenset[str] = frozenset()

# The model and optimizers of the assignment's test cells (hidden blocks bind them from here).
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
    final ``state``, the optimizer ``opt_state`` (see :func:`helpers.accumulation.optimizer_state_of`),
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


def check_windows(per_rank: Sequence[Any], expected: dict[str, Any], num_micro_batches: int, case: str, *,
                  skip_results: int = 0, check_loss: bool = True) -> None:
    """``train_window`` trained like ``expected``, every group member reporting the same window losses;
    the first ``skip_results`` windows' results are not compared."""
    outs = [o if o is None else {**o, "results": o["results"][skip_results:]}
            for o in plain(list(per_rank), "train_window's results")]
    acc.assert_windows_match(outs, expected, num_micro_batches, case, check_loss=check_loss)
    losses = [[loss for loss, _ in o["results"]] for o in outs if o is not None]
    for member, theirs in enumerate(losses[1:], start=1):
        if check_loss and not all(type(a) is float and math.isclose(a, b, rel_tol=1e-9)
                                  for a, b in zip(theirs, losses[0])):
            raise AssertionError(
                f"[{case}] group member {member} reported window losses {theirs}, member 0 {losses[0]}: "
                f"window_loss must be the same on every rank. Sum the loss over the group with an "
                f"all-reduce; a reduce leaves the full sum on one rank only.")


def check_skipped_together(per_rank: Sequence[Any], expected_steps: Sequence[bool], case: str) -> None:
    """Every rank reported the step/skip pattern ``expected_steps`` as plain bools."""
    acc.assert_skipped_together(plain(list(per_rank), "train_window's results"), expected_steps, case)


def check_window_cost(fn: Callable[..., Any], cases: Sequence[acc.CostCase]) -> None:
    """``fn`` returns plain numbers equal to :func:`window_allreduce_cost` on every case."""
    def plain_fn(*args: Any, **kwargs: Any) -> Any:
        return plain(fn(*args, **kwargs), "window_allreduce_cost's result")

    acc.assert_window_cost(plain_fn, [(case, window_allreduce_cost(*case[:4], no_sync=case[4], num_buckets=case[5]))
                                      for case in cases])


# --------------------------------------------------------------------------- stored results

# The visible cases of source/04_accumulation (cells test_train_window_objective,
# _scaling_and_clipping and _skips_together); change them together.
_SIZES_2A, _SIZES_2CD = [[1, 4, 2], [3, 2, 6]], [[2, 1, 3], [1, 4, 2]]
VISIBLE_CASES: dict[str, tuple[list[list[list[int]]], list[int], acc.OptimizerSpec, float, list[int]]] = {
    # name: (sizes, window seeds, optimizer, max_norm, skipped windows)
    "objective": (_SIZES_2A, [1, 2], ADAM, math.inf, []),
    "clip": (_SIZES_2CD, [7, 8], SGD, 0.2, []),
    "skip": (_SIZES_2CD, [9, 10], SGD, 1.0, [0]),
}
CHAPTER_MICRO_BATCHES, CHAPTER_WORLD_SIZE = (1, 2, 4, 6, 8), 3  # notebooks/04 section 4.3, TinyMLP in float32


def visible_references() -> dict[str, Any]:
    """Expected state, optimizer state and window losses of each visible case (JSON data)."""
    out = {}
    for name, (sizes, seeds, spec, max_norm, skip) in VISIBLE_CASES.items():
        windows = [acc.make_window(sizes, seed=s) for s in seeds]
        result = reference_training(MLP(), windows, spec, max_norm, skip=skip)
        out[name] = {"state": tensors_to_json(result["state"]), "opt_state": tensors_to_json(result["opt_state"]),
                     "losses": [float(f"{v:.9g}") for v in result["losses"]]}
    return out


def window_costs() -> dict[str, dict[str, list[float]]]:
    """Per ``"num_params,bytes,world_size,K"``: both syncs' ``[all-reduces, bytes]`` (explorer grid and chapter)."""
    tiny = sum(p.numel() for p in TinyMLP().parameters())
    cases = list(itertools.product(acc.EXPLORER_PARAMS, acc.EXPLORER_BYTES, acc.EXPLORER_WORLD_SIZES,
                                   acc.EXPLORER_MICRO_BATCHES))
    cases += [(tiny, 4, CHAPTER_WORLD_SIZE, k) for k in CHAPTER_MICRO_BATCHES]
    return {",".join(map(str, case)): {"no_sync": list(window_allreduce_cost(*case, no_sync=True)),
                                       "every_micro_batch": list(window_allreduce_cost(*case, no_sync=False))}
            for case in cases}


STORED_ROUNDING = {acc.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {acc.STORED_REFERENCES: visible_references, acc.STORED_COSTS: window_costs}
