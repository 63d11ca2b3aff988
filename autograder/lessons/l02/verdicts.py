"""Lesson 02, one global denominator: references and hidden checks (the grader's side only).

The references are single-process and float64: one process that sees every valid token of a
window at once. The hidden checks copy what a student's code returned into plain data
(:mod:`autograder.plain`) before comparing it, then raise the student-facing messages of
:mod:`helpers.l02_global_denominator`.

Units: counts are valid target tokens; losses are nats per token.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from autograder.lessons.l01.verdicts import run_in_subgroup
from autograder.plain import plain
from helpers import l02_global_denominator as D
from helpers.shared.data import TokenBatch, token_batch, uneven_window
from helpers.shared.state import State, state_of, to_float64

from .drivers import Window, train_in_subgroup_on_rank


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


def factors(counts: Sequence[int]) -> list[float | None]:
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
    return factors(counts)


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
