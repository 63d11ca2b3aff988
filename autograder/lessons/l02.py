"""Instructor side of lesson 02 (one global denominator): references, hidden checks, stored results.

The references are single-process and float64: one process that sees every valid token of a
window at once. The hidden checks copy what a student's code returned into plain data
(:mod:`autograder.plain`) before comparing it, then raise the student-facing messages of
:mod:`helpers.l02_global_denominator`. ``STORED`` produces the expected values of the visible tests and
the factors the chapter and its explorer show.

Units: counts are valid target tokens; losses are nats per token.
"""
from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autograder.lessons.l01 import in_subgroup, run_in_subgroup
from autograder.store import FLOAT32_RESULTS
from autograder.plain import plain
from helpers import l02_global_denominator as D
from helpers.shared.data import TokenBatch, tensors_to_json, token_batch, uneven_window
from helpers.shared.state import State, state_of, to_float64

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "padded_loss_and_gradient",
    "train_in_subgroup_on_rank",
})

Window = Sequence[D.MicroBatches]  # window[rank][k]
# Ship this module's kernel-side drivers by value: the notebook's kernel never imports the
# autograder package. The drivers use only torch and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- references


def masked_loss_sum(token_losses: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``token_losses`` over the positions where ``mask`` is True (nats)."""
    return torch.where(mask, token_losses, torch.zeros((), dtype=token_losses.dtype)).sum()


def window_count(window: Window) -> int:
    """Valid target tokens in a whole window, ``window[rank][k]`` (all ranks)."""
    return sum(mb.num_valid for per_rank in window for mb in per_rank)


@contextmanager
def _one_thread() -> Iterator[None]:
    """Run tiny-model math on one intra-op thread (restored afterwards).

    On a busy 2-core machine torch's default 2 threads contend with the rank processes:
    a TinyLM reference gradient measured 2.1 s with 2 threads and 0.03 s with 1.
    """
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


def _window_loss_sum(model: nn.Module, window: Window) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for per_rank in window:
        for mb in per_rank:
            total = total + masked_loss_sum(D.token_cross_entropy(model(mb.tokens), mb.targets), mb.mask)
    return total


def _gradients(model: nn.Module, loss: torch.Tensor) -> State:
    """d loss / d parameter for every trainable parameter (zero where it is unused)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {n: (torch.zeros_like(p) if g is None else g) for (n, p), g in zip(named, grads)}


def global_mean_gradients(model: nn.Module, window: Window) -> State:
    """float64 gradient of the global mean loss over every valid token of ``window``.

    ``window[rank][k]`` is rank ``rank``'s micro-batch ``k``; this is one process seeing
    all the valid tokens at once. With no valid token at all the gradient is zero.
    ``model`` is not modified.
    """
    ref = to_float64(model)
    with _one_thread():
        return _gradients(ref, _window_loss_sum(ref, window) / max(window_count(window), 1))


def mean_of_means_gradients(model: nn.Module, window: Window) -> State:
    """float64 gradient that averaging per-rank mean losses produces (the classic bias).

    Rank ``r``'s loss is its own mean over its valid tokens (0 for a rank without any);
    DDP then averages the gradients over the ranks. ``model`` is not modified.
    """
    ref = to_float64(model)
    with _one_thread():
        loss = sum(_window_loss_sum(ref, [per_rank]) / max(window_count([per_rank]), 1)
                   for per_rank in window) / len(window)
        return _gradients(ref, loss)


def sgd_reference(model: nn.Module, windows: Sequence[Window], lr: float, momentum: float,
                  weight_decay: float = 0.0) -> State:
    """float64 state after one SGD step per window on the global mean over valid tokens.

    A window without any valid token is skipped (no step: with momentum or weight decay a
    zero-gradient step would still move the parameters). ``model`` is not modified.
    """
    ref = to_float64(model)
    opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    with _one_thread():
        for window in windows:
            count = window_count(window)
            if count == 0:
                continue
            opt.zero_grad(set_to_none=True)
            (_window_loss_sum(ref, window) / count).backward()
            opt.step()
    return state_of(ref)


def padded_window(world_size: int, micro_batches: int, seed: int, *, rows: int = 2,
                  empty_ranks: tuple[int, ...] = (),
                  padding_only: Sequence[tuple[int, int]] = ()) -> list[list[TokenBatch]]:
    """:func:`helpers.shared.data.uneven_window`, with micro-batch ``k`` of rank ``r`` all padding for each
    ``(r, k)`` in ``padding_only``, and of another shape (``rows + 1`` sequences of 5 positions)."""
    window = uneven_window(world_size, micro_batches, rows=rows, empty_ranks=empty_ranks, seed=seed)
    for rank, k in padding_only:
        window[rank][k] = token_batch([0] * (rows + 1), max_len=5, seed=seed + 10 * rank + k)
    return window


def _factors(counts: Sequence[int]) -> list[float | None]:
    """Per rank ``T / (N n_r)``; ``None`` for a rank without tokens (its factor is undefined)."""
    total, world_size = sum(counts), len(counts)
    return [total / (world_size * n) if n else None for n in counts]


def mean_of_means_factors(counts: Sequence[int]) -> list[float]:
    """Per rank, the factor by which the mean of per-rank means over-weights one of its tokens.

    A token on rank ``r`` gets weight ``1 / (N * n_r)`` from the mean of ``N`` per-rank means
    and ``1 / T`` from the global mean (``T = sum(counts)``): the factor is ``T / (N * n_r)``.
    Every count must be positive.
    """
    if not counts or any(n <= 0 for n in counts):
        raise ValueError(f"need at least one rank and positive counts, got {list(counts)}")
    return _factors(counts)


# --------------------------------------------------------------------------- hidden-test drivers (run in the kernel)


def padded_loss_and_gradient(loss_fn: Callable[..., Any], losses: torch.Tensor, valid: torch.Tensor,
                             padding: float, mask: torch.Tensor, global_count: int,
                             world_size: int) -> dict[str, Any]:
    """``loss_fn`` of token losses whose positions outside ``valid`` hold ``padding``, backpropagated.

    The token losses are ``torch.where(valid, leaf, padding)`` for a leaf copy of ``losses``;
    ``loss_fn(token_losses, mask, global_count, world_size)`` is reported by
    :func:`helpers.l02_global_denominator.backward_report` with respect to that leaf (plain data). No
    expected value is involved: the checks compare in the grader.
    """
    leaf = losses.detach().clone().requires_grad_()
    token_losses = torch.where(valid, leaf, torch.full_like(leaf, padding))
    return D.backward_report(loss_fn(token_losses, mask, global_count, world_size), leaf)


def train_in_subgroup_on_rank(train_fn: Callable[..., Any], model_seed: int, windows: Sequence[Window], lr: float,
                              momentum: float, ranks: Sequence[int]) -> dict[str, Any] | None:
    """:func:`helpers.l02_global_denominator.train_on_rank` on the members of ``new_group(ranks)`` only.

    Each member wraps its TinyLM in ``DistributedDataParallel`` on the group and calls
    ``train_fn(ddp_model, optimizer, window[group rank], group=group)`` per window; outsiders
    return ``None`` (:func:`autograder.lessons.l01.in_subgroup`).
    """
    def member(group: dist.ProcessGroup) -> dict[str, Any]:
        model = D.tiny_lm(model_seed)
        ddp = DistributedDataParallel(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
        me = dist.get_rank(group)
        returned = [train_fn(ddp, opt, window[me], group=group) for window in windows]
        return {"state": state_of(model), "returned": returned}

    return in_subgroup(ranks, member)


# --------------------------------------------------------------------------- hidden checks


def check_count(per_rank: Sequence[Any], expected: int, case: str) -> None:
    """Every rank's ``window_token_count`` result is the Python int ``expected``."""
    D.assert_count_result(plain(list(per_rank), "window_token_count's results"), expected, case)


def check_loss_value(got: Any, expected: float, case: str, world_size: int = 1) -> None:
    """``global_token_loss`` returned a plain finite 0-dim tensor equal to ``expected``."""
    D.assert_loss_value(plain(got, f"[{case}] global_token_loss's result"), expected, case, world_size)


def check_ddp_gradients(per_rank: Sequence[Any], model_seed: int, window: Window, case: str) -> None:
    """The DDP gradients of lesson 2's :func:`ddp_loss_gradients_on_rank` are the global-mean gradient."""
    model = D.tiny_lm(model_seed)
    expected, biased = global_mean_gradients(model, window), mean_of_means_gradients(model, window)
    for rank, out in enumerate(plain(list(per_rank), "the ranks' results")):
        if not all(isinstance(v, float) and math.isfinite(v) for v in out["losses"]):
            raise AssertionError(f"[{case}] rank {rank}: loss values {out['losses']}; every loss must be finite.")
        D.assert_gradients_match(out["grads"], expected, biased, len(window), f"{case}, rank {rank}")


def check_training(per_rank: Sequence[Any], model_seed: int, windows: Sequence[Window], lr: float,
                   momentum: float, case: str, weight_decay: float = 0.0) -> None:
    """Every rank returned each window's global count and trained like :func:`sgd_reference`."""
    outs = plain(list(per_rank), "the ranks' results")
    counts = [window_count(w) for w in windows]
    for rank, out in enumerate(outs):
        if out["returned"] != counts:
            raise AssertionError(f"[{case}] rank {rank} returned counts {out['returned']}, expected {counts} "
                                 f"(the global valid-token count of each window).")
    expected = sgd_reference(D.tiny_lm(model_seed), windows, lr=lr, momentum=momentum, weight_decay=weight_decay)
    D.assert_training_matches([out["state"] for out in outs], expected, case)


def check_training_in_subgroup(train_fn: Callable[..., Any], model_seed: int, windows: Sequence[Window], lr: float,
                               momentum: float, ranks: Sequence[int]) -> None:
    """4 ranks, only ``new_group(ranks)`` trains (:func:`train_in_subgroup_on_rank`): :func:`check_training`
    on its members, each window holding one list of micro-batches per member."""
    out = run_in_subgroup(train_in_subgroup_on_rank, train_fn, model_seed, windows, lr, momentum, list(ranks),
                          ranks=ranks, what="train_window(ddp_model, optimizer, micro_batches, group)")
    check_training([out[r] for r in ranks], model_seed, windows, lr, momentum,
                   f"group {list(ranks)} of 4 ranks, DDP on the group, SGD momentum {momentum}")


def check_factors(fn: Callable[[list[int]], Any], cases: Sequence[Sequence[int]]) -> None:
    """``fn(counts)`` returns plain numbers equal to :func:`mean_of_means_factors` on every case."""
    D.assert_factors(lambda counts: plain(fn(counts), f"mean_of_means_factors({counts})"),
                     [(counts, mean_of_means_factors(counts)) for counts in cases])


# --------------------------------------------------------------------------- stored results

# The visible tests of source/02_global_denominator (cells test_global_token_loss and
# test_train_window) run these cases; change them together.
VISIBLE_LOSS_SEED, VISIBLE_LOSS_WINDOW = 11, {"world_size": 2, "micro_batches": 2, "seed": 3}
VISIBLE_TRAIN_SEED, VISIBLE_TRAIN_WINDOWS = 5, [
    {"world_size": 2, "micro_batches": 2, "empty_ranks": (1,), "seed": 1},
    {"world_size": 2, "micro_batches": 2, "seed": 2},
]
VISIBLE_TRAIN_LR = 0.2
# Counts the chapter shows: its window of section 2.1 (and without the empty rank), and
# rank 0 holding rho times the 8 tokens of ranks 1 and 2 (optional section 2.B).
CHAPTER_COUNTS = [[13, 12, 0], [13, 12]] + [[8 * rho, 8, 8] for rho in (1, 2, 4, 8, 16, 32)]


def visible_references() -> dict[str, Any]:
    """The float64 tensors the visible tests compare with (see ``helpers.l02_global_denominator.stored_reference``)."""
    window = uneven_window(**VISIBLE_LOSS_WINDOW)
    model = D.tiny_lm(VISIBLE_LOSS_SEED)
    windows = [uneven_window(**w) for w in VISIBLE_TRAIN_WINDOWS]
    return {
        "loss_gradients": tensors_to_json(global_mean_gradients(model, window)),
        "loss_mean_of_means": tensors_to_json(mean_of_means_gradients(model, window)),
        "train_state": tensors_to_json(sgd_reference(D.tiny_lm(VISIBLE_TRAIN_SEED), windows,
                                                     lr=VISIBLE_TRAIN_LR, momentum=0.0)),
    }


def token_factors() -> dict[str, list[float | None]]:
    """Factors ``T / (N n_r)`` keyed ``"n_0,n_1,..."``: the explorer's grid and the chapter's counts."""
    grid = [list(c) for c in itertools.product(D.EXPLORER_COUNTS, repeat=D.EXPLORER_RANKS)]
    return {",".join(map(str, counts)): [None if f is None else float(f"{f:.9g}") for f in _factors(counts)]
            for counts in grid + CHAPTER_COUNTS}


STORED_ROUNDING = {D.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {D.STORED_REFERENCES: visible_references, D.STORED_FACTORS: token_factors}
