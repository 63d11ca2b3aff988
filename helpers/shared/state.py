"""Model factories, batches and state utilities that the lessons share.

* **model factories** (:class:`PerRankInit`, :class:`SameInit`, :func:`uneven_mlp`,
  :func:`frozen_first`) and deterministic **data** (:func:`make_batches`, :func:`rank_shard`);
* **state utilities** (:func:`state_of`, :func:`tensors_of`, :func:`grads_of`,
  :func:`to_float64`, :func:`mean_of`); :func:`mse`, the loss of lessons 1 and 3.

Functions of this importable package are shipped to the ranks by reference, not by value.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.shared.models import make_regression_batch, shard_batch

Batch = tuple[torch.Tensor, torch.Tensor]


State = dict[str, torch.Tensor]


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every element (the loss of every lesson-1 exercise)."""
    return torch.nn.functional.mse_loss(output, target)


@dataclass
class PerRankInit:
    """A picklable ``model_fn`` whose initial weights differ from rank to rank.

    Calling it builds ``factory(**kwargs)`` under the seed ``seed + rank`` (the rank of the
    default process group, or 0 outside one) without disturbing the global RNG. This is
    what a real launcher gives you: every process seeds itself, so replicas start apart
    unless somebody broadcasts.
    """

    factory: Callable[..., nn.Module]
    seed: int
    kwargs: dict[str, Any] = field(default_factory=dict)

    def for_rank(self, rank: int) -> nn.Module:
        """The model that rank ``rank`` builds (usable outside a process group)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed + rank)
            return self.factory(**self.kwargs)

    def __call__(self) -> nn.Module:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        return self.for_rank(rank)


@dataclass
class SameInit(PerRankInit):
    """A picklable ``model_fn`` that builds the same model on every rank (seed ``seed``)."""

    def __call__(self) -> nn.Module:
        return self.for_rank(0)


def frozen_first(module: nn.Module) -> nn.Module:
    """Freeze the first parameter of ``module`` (its ``.grad`` stays ``None``) and return it."""
    next(iter(module.parameters())).requires_grad_(False)
    return module


def make_batches(
    num_steps: int, batch_size: int, in_features: int, out_features: int, seed: int = 0
) -> list[Batch]:
    """``num_steps`` deterministic global regression batches of ``batch_size`` rows each."""
    return [
        make_regression_batch(batch_size, in_features, out_features, seed=seed + step)
        for step in range(num_steps)
    ]


def rank_shard(x: torch.Tensor, y: torch.Tensor, group: dist.ProcessGroup | None = None) -> Batch:
    """This rank's contiguous equal shard of a global batch (call inside ``run``)."""
    return shard_batch(x, y, dist.get_rank(group), dist.get_world_size(group))


def state_of(model: nn.Module) -> State:
    """A detached copy of every parameter and buffer of ``model``, keyed by name."""
    return {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()}


def tensors_of(model: nn.Module) -> State:
    """A detached copy of every parameter and every buffer of ``model`` (non-persistent buffers too,
    which ``state_dict()`` leaves out), keyed by name."""
    return {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}


def grads_of(model: nn.Module) -> dict[str, torch.Tensor | None]:
    """A copy of every parameter's ``.grad`` (``None`` where there is none), keyed by name."""
    return {
        name: (None if p.grad is None else p.grad.detach().clone())
        for name, p in model.named_parameters()
    }


def to_float64(model: nn.Module) -> nn.Module:
    """A float64 deep copy of ``model`` (integer buffers keep their dtype)."""
    return copy.deepcopy(model).double()


def mean_of(per_rank: Sequence[dict[str, torch.Tensor | None]]) -> dict[str, torch.Tensor | None]:
    """Element-wise float64 mean over ranks of per-rank tensor dicts (``None`` stays ``None``)."""
    out: dict[str, torch.Tensor | None] = {}
    for name in per_rank[0]:
        values = [d[name] for d in per_rank]
        if any(v is None for v in values):
            out[name] = None
        else:
            out[name] = torch.stack([v.double() for v in values]).mean(0)
    return out


def uneven_mlp(
    in_features: int = 5, hidden: int = 7, out_features: int = 3, freeze_first: bool = True
) -> nn.Module:
    """An MLP with unequal parameter shapes, a bias-free layer and (optionally) a frozen layer.

    With ``freeze_first`` the first weight has ``requires_grad=False``, so its ``.grad``
    stays ``None`` after backward.
    """
    model = nn.Sequential(
        nn.Linear(in_features, hidden),
        nn.Tanh(),
        nn.Linear(hidden, hidden + 2, bias=False),
        nn.ReLU(),
        nn.Linear(hidden + 2, out_features),
    )
    return frozen_first(model) if freeze_first else model
