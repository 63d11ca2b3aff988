"""Lesson 01, replicated training: what grading may send into the student's kernel.

The hidden models and the hidden-test drivers (``*_on_rank``, :func:`in_subgroup`) that run on every rank of a
gloo group; :data:`KERNEL_SIDE` names them. Nothing here is a reference or an expected value: the checks that
use them compare in the grader (:mod:`.verdicts`).
"""
from __future__ import annotations

import sys
from functools import partial
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from helpers.shared.models import BatchNormMLP, TinyMLP
from helpers.shared.state import Batch, State, frozen_first, grads_of, mse, rank_shard, state_of
from helpers.l01_replicated_training import (
    Perturb, aligned_on_rank, desync_buffers, set_rank_gradients, sync_probe_on_rank, train_wrapped)

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
# Real DDP, the reference of the design exercise, runs on the grader's own ranks (:func:`.verdicts.real_ddp`).
KERNEL_SIDE = frozenset({
    "ScratchBufferMLP",
    "UnusedHead",
    "WarmBatchNormMLP",
    "aligned_in_subgroup_on_rank",
    "aligned_scratch_on_rank",
    "average_in_subgroup_on_rank",
    "average_synthetic_on_rank",
    "broadcast_all_buffers_on_rank",
    "broadcast_in_subgroup_on_rank",
    "frozen_batchnorm_mlp",
    "in_subgroup",
    "train_wrapped_on_rank",
    "wrap_in_subgroup_on_rank",
    "wrapped_grads_on_rank",
})

# Ship this module's rank-side drivers by value: a rank then never imports the autograder
# package (its nbgrader imports cost seconds per rank process). The drivers use only torch
# and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- hidden models


class UnusedHead(nn.Module):
    """A :class:`TinyMLP` and a trainable ``head`` that forward never uses: backward leaves its
    ``.grad`` at ``None`` although it requires grad."""

    def __init__(self, **kwargs: int) -> None:
        super().__init__()
        self.body = TinyMLP(**kwargs)
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class ScratchBufferMLP(BatchNormMLP):
    """A :class:`BatchNormMLP` with a non-persistent buffer ``scratch``, drawn at construction (so it
    differs between :class:`PerRankInit` ranks): ``model.buffers()`` lists it, ``state_dict()`` does not."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scratch", torch.randn(5), persistent=False)


def frozen_batchnorm_mlp() -> nn.Module:
    """A :class:`BatchNormMLP` whose first weight is frozen (``requires_grad=False``)."""
    return frozen_first(BatchNormMLP())


class WarmBatchNormMLP(nn.Module):
    """Everything DDP synchronises: a :class:`BatchNormMLP` ``body`` with a frozen first weight, a
    trainable ``head`` that forward never uses (its ``.grad`` stays ``None``) and a non-persistent
    buffer ``scratch``.

    Construction draws ``scratch`` and runs one training-mode forward on random rows, so under
    :class:`PerRankInit` every parameter and buffer (running statistics, ``num_batches_tracked``
    included) differs from rank to rank.
    """

    def __init__(self, in_features: int = 6, hidden: int = 12, out_features: int = 3) -> None:
        super().__init__()
        self.body = frozen_first(BatchNormMLP(in_features, hidden, out_features))
        self.head = nn.Linear(out_features, 2)
        self.register_buffer("scratch", torch.randn(4), persistent=False)
        with torch.no_grad():
            self.body(torch.randn(5, in_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


# --------------------------------------------------------------------------- hidden drivers (on every rank)


def average_synthetic_on_rank(
    average_fn: Callable[..., None], model_fn: Callable[[], nn.Module], seed: int
) -> tuple[dict, dict]:
    """Set rank-dependent gradients (``set_rank_gradients``), average; return (before, after)."""
    model = model_fn()
    before = set_rank_gradients(model, seed)
    average_fn(model)
    return before, grads_of(model)


def in_subgroup(ranks: Sequence[int], call: Callable[[dist.ProcessGroup], Any]) -> Any:
    """On every rank ``new_group(ranks)``; members return ``call(group)``, the others ``None``.

    Then every rank enters a barrier on the default group. A member that issues a collective
    on the default group instead of ``group`` meets an outsider's barrier there, which the
    cluster reports at once as a mismatch (instead of a hang until the timeout).
    """
    group = dist.new_group(list(ranks))
    result = call(group) if dist.get_rank() in ranks else None
    dist.barrier()
    return result


def average_in_subgroup_on_rank(
    average_fn: Callable[..., None], model_fn: Callable[[], nn.Module], ranks: Sequence[int], seed: int
) -> tuple[dict, dict]:
    """Rank-dependent gradients on every rank; members of ``ranks`` call ``average_fn(model, group=group)``.

    Returns (grads before, grads after) on this rank.
    """
    model = model_fn()
    before = set_rank_gradients(model, seed)
    in_subgroup(ranks, lambda group: average_fn(model, group=group))
    return before, grads_of(model)


def aligned_in_subgroup_on_rank(
    aligned_fn: Callable[..., bool], model_fn: Callable[[], nn.Module], ranks: Sequence[int],
    perturbations: Sequence[Perturb], in_features: int,
) -> tuple[object, bool] | None:
    """:func:`aligned_on_rank` with ``aligned_fn(model, group=group)`` on the members of ``ranks``."""
    return in_subgroup(ranks, lambda group: aligned_on_rank(partial(aligned_fn, group=group), model_fn,
                                                            perturbations, in_features))


def broadcast_in_subgroup_on_rank(
    broadcast_fn: Callable[..., None], model_fn: Callable[[], nn.Module], ranks: Sequence[int], src: int,
    in_features: int,
) -> tuple[State, State]:
    """Create ``new_group(ranks)`` on every rank; members call ``broadcast_fn(model, src, group)``.

    ``src`` is a *global* rank. Returns (state before, state after) on this rank.
    """
    group = dist.new_group(list(ranks))
    model = model_fn()
    desync_buffers(model, in_features)
    before = state_of(model)
    if dist.get_rank() in ranks:
        broadcast_fn(model, src=src, group=group)
    return before, state_of(model)


def broadcast_all_buffers_on_rank(broadcast_fn: Callable[..., None], model_fn: Callable[[], nn.Module],
                                  src: int) -> tuple[State, State]:
    """``broadcast_fn(model, src=src)``; returns every buffer (``named_buffers``, non-persistent ones too)
    before and after the call on this rank."""
    model = model_fn()
    before = {n: b.detach().clone() for n, b in model.named_buffers()}
    broadcast_fn(model, src=src)
    return before, {n: b.detach().clone() for n, b in model.named_buffers()}


def aligned_scratch_on_rank(aligned_fn: Callable[..., bool], model_fn: Callable[[], nn.Module],
                            rank: int) -> object:
    """Identical :class:`ScratchBufferMLP` replicas but for one element of the non-persistent ``scratch``
    buffer on ``rank``; returns ``aligned_fn(model)``."""
    model = model_fn()
    if dist.get_rank() == rank:
        model.scratch[2] += 1.0
    return aligned_fn(model)


def wrap_in_subgroup_on_rank(wrapper_cls: Callable[..., nn.Module], model_fn: Callable[[], nn.Module],
                             ranks: Sequence[int], in_features: int) -> dict[str, Any]:
    """:func:`sync_probe_on_rank` on every rank; the members of ``new_group(ranks)`` construct
    ``wrapper_cls(model, group=group)``, the others do nothing to their model."""
    group = dist.new_group(list(ranks))
    member = dist.get_rank() in ranks
    out = sync_probe_on_rank(lambda model: wrapper_cls(model, group=group) if member else None, model_fn,
                             in_features)
    dist.barrier()  # a member's collective on the default group meets this barrier: a mismatch, not a hang
    return out


def wrapped_grads_on_rank(wrapper_cls: Callable[..., nn.Module], model_fn: Callable[[], nn.Module],
                          x: torch.Tensor, y: torch.Tensor, ranks: Sequence[int] | None) -> dict | None:
    """Wrap ``model_fn()`` (on ``new_group(ranks)``, or the default group when ``ranks`` is None), run
    forward and backward on this rank's shard (by rank in the group) and return the module's gradients.
    Ranks outside the group return ``None``."""
    def grads(group: dist.ProcessGroup | None) -> dict:
        model = model_fn()
        wrapped = wrapper_cls(model) if group is None else wrapper_cls(model, group=group)
        xs, ys = rank_shard(x, y, group)
        model.zero_grad(set_to_none=True)
        mse(wrapped(xs), ys).backward()
        return grads_of(model)

    return grads(None) if ranks is None else in_subgroup(ranks, grads)


def train_wrapped_on_rank(wrapper_cls: Callable[..., nn.Module], model_fn: Callable[[], nn.Module],
                          batches: Sequence[Batch], lr: float, momentum: float,
                          ranks: Sequence[int] | None) -> State | None:
    """:func:`helpers.l01_replicated_training.train_wrapped` on the default group, or on the members of
    ``new_group(ranks)`` (the others return ``None``)."""
    if ranks is None:
        return train_wrapped(wrapper_cls, model_fn, batches, lr, momentum)
    return in_subgroup(ranks, lambda group: train_wrapped(wrapper_cls, model_fn, batches, lr, momentum, group))
