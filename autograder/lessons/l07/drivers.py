"""Lesson 07's drivers: what grading may send into the student's kernel, and nothing else.

A hidden model (:func:`block_mlp`); the driver that trains a student's unit, stepping its shards by
hand (:func:`step_shards_by_hand`: no optimizer, one batch per call; in a subgroup,
:func:`train_in_subgroup_on_rank`); the stand-in unit that records a student's loop
(:class:`RecordingUnit`, :func:`recorded_train_on_rank`), which shards nothing. None of it solves an
exercise (issue 23), and none is a reference or an expected value (those are in :mod:`.verdicts`).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.l01 import in_subgroup
from helpers import l07_parameter_sharding as param_sharding
from helpers.shared.state import rank_shard, state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "RecordingUnit",
    "block_mlp",
    "recorded_train_on_rank",
    "step_shards_by_hand",
    "train_in_subgroup_on_rank",
})

# Ship this module's rank-side code (the drivers and the stand-in unit below) by value: a rank then never
# imports the autograder package. None of it solves an exercise: the units' loop steps the shards by hand,
# one batch per call, and the loop's stand-in unit keeps every parameter unsharded.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


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
