"""Models, data, state utilities and the rank-side drivers of lesson 1's visible tests.

* **model factories** (:class:`PerRankInit`, :class:`SameInit`, :func:`uneven_mlp`,
  :func:`frozen_first`) and deterministic **data** (:func:`make_batches`, :func:`rank_shard`);
* **state utilities** (:func:`state_of`, :func:`tensors_of`, :func:`grads_of`, :func:`to_float64`,
  :func:`set_rank_gradients`, :func:`mean_of`);
* **rank-side drivers** (``*_on_rank``, :func:`train_wrapped`): they run *inside*
  ``helpers.cluster.run`` on every rank, call a student's function (or construct a student's
  class) the way an exercise's contract says, and return plain tensors so that the checks can
  run in the notebook process.

Nothing here computes what an exercise asks for: the float64 references and the real-DDP
training that hidden tests compare against live on the instructor's side
(``autograder.lessons.l01``). Functions of this importable package are shipped to the ranks
by reference, not by value. Every loss in lesson 1 is the mean squared error over the rows
a rank holds (:func:`mse`).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.models import make_regression_batch, shard_batch

Batch = tuple[torch.Tensor, torch.Tensor]
State = dict[str, torch.Tensor]


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error over every element (the loss of every lesson-1 exercise)."""
    return torch.nn.functional.mse_loss(output, target)


# --------------------------------------------------------------------------- models


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


# --------------------------------------------------------------------------- data


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


# --------------------------------------------------------------------------- state


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


def set_rank_gradients(model: nn.Module, seed: int) -> dict[str, torch.Tensor | None]:
    """Give every parameter that requires grad a deterministic, rank-dependent ``.grad``.

    Rank ``r`` gets ``(r + 1) * base + noise_r`` where ``base`` is shared and ``noise_r`` is
    rank-specific, so the mean over ranks is neither any one rank's gradient nor a simple
    multiple of one. Parameters with ``requires_grad=False`` keep ``grad=None``. Returns a
    copy of the gradients that were set. Call inside ``run``.
    """
    rank = dist.get_rank()
    for i, (_, p) in enumerate(model.named_parameters()):
        if not p.requires_grad:
            p.grad = None
            continue
        base = torch.randn(p.shape, generator=torch.Generator().manual_seed(seed + 7919 * i))
        noise = torch.randn(
            p.shape, generator=torch.Generator().manual_seed(seed + 7919 * i + 104729 * (rank + 1))
        )
        p.grad = ((rank + 1) * base + noise).to(p.dtype)
    return grads_of(model)


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


# --------------------------------------------------------------------------- zoo and rank-side drivers
# The drivers below run *inside* ``helpers.cluster.run`` on every rank. They take the
# student's function as an argument, call it the way an exercise's contract says, and
# return plain tensors so the checks can run in the notebook process.


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


def desync_buffers(model: nn.Module, in_features: int) -> None:
    """Make this rank's buffers differ from every other rank's (call inside ``run``).

    Runs ``rank + 1`` training-mode forward passes on rank-specific data (BatchNorm
    running statistics and ``num_batches_tracked`` change) and adds ``rank + 3`` to every
    integer buffer that has no BatchNorm meaning (e.g. ``TinyMLP.step_count``).
    """
    rank = dist.get_rank()
    g = torch.Generator().manual_seed(5000 + rank)
    was_training = model.training
    model.train()
    with torch.no_grad():
        for _ in range(rank + 1):
            model(torch.randn(6, in_features, generator=g))
        for name, buf in model.named_buffers():
            if not buf.is_floating_point() and not name.endswith("num_batches_tracked"):
                buf.add_(rank + 3)
    model.train(was_training)


def average_on_rank(
    average_fn: Callable[..., None], model_fn: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor
) -> tuple[dict, dict]:
    """Backward on this rank's shard, then ``average_fn(model)``; return (grads before, after)."""
    model = model_fn()
    xs, ys = rank_shard(x, y)
    model.zero_grad(set_to_none=True)
    mse(model(xs), ys).backward()
    before = grads_of(model)
    average_fn(model)
    return before, grads_of(model)


def sync_probe_on_rank(sync: Callable[[nn.Module], Any], model_fn: Callable[[], nn.Module],
                       in_features: int) -> dict[str, Any]:
    """Desync buffers, build an optimizer, call ``sync(model)``, probe identity.

    Returns ``before``/``after`` (:func:`tensors_of`), parameter ``id``s before and after the call, the
    names of the ``buffers``, and ``optimizer_moved``: whether an SGD optimizer built *before* the call
    still moves the model's parameters afterwards (a step with unit gradients and lr=1 must subtract 1).
    """
    model = model_fn()
    desync_buffers(model, in_features)
    before = tensors_of(model)
    params = list(model.parameters())
    ids_before = [id(p) for p in params]
    opt = torch.optim.SGD(params, lr=1.0)
    sync(model)
    after = tensors_of(model)
    ids_after = [id(p) for p in model.parameters()]
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    moved = all(
        torch.allclose(p.detach(), after[name] - 1.0)
        for name, p in model.named_parameters()
    )
    return {"before": before, "after": after, "ids_before": ids_before,
            "ids_after": ids_after, "optimizer_moved": moved,
            "buffers": [name for name, _ in model.named_buffers()]}


def broadcast_on_rank(
    broadcast_fn: Callable[..., None],
    model_fn: Callable[[], nn.Module],
    src: int,
    in_features: int,
) -> dict[str, Any]:
    """:func:`sync_probe_on_rank` of ``broadcast_fn(model, src=src)``."""
    return sync_probe_on_rank(lambda model: broadcast_fn(model, src=src), model_fn, in_features)


def wrap_on_rank(wrapper_cls: Callable[..., nn.Module], model_fn: Callable[[], nn.Module],
                 in_features: int) -> dict[str, Any]:
    """:func:`sync_probe_on_rank` of constructing ``wrapper_cls(model)`` on the default group."""
    return sync_probe_on_rank(wrapper_cls, model_fn, in_features)


@dataclass
class Perturb:
    """Change one element of tensor ``name`` on rank ``rank`` only.

    ``kind``: ``"swap"`` exchanges the first two distinct elements (sums and norms are
    unchanged), ``"ulp"`` moves element ``index`` to the next representable float,
    ``"add_one"`` adds 1 to element ``index`` (for integer buffers).
    """

    rank: int
    name: str
    kind: str = "ulp"
    index: int = 0

    def apply(self, model: nn.Module) -> None:
        if dist.get_rank() != self.rank:
            return
        t = model.state_dict(keep_vars=True)[self.name].detach().view(-1)
        with torch.no_grad():
            if self.kind == "swap":
                j = int((t != t[0]).nonzero()[0])
                a, b = t[0].clone(), t[j].clone()
                t[0], t[j] = b, a
            elif self.kind == "ulp":
                t[self.index] = torch.nextafter(t[self.index], torch.tensor(math.inf, dtype=t.dtype))
            elif self.kind == "add_one":
                t[self.index] += 1
            else:
                raise ValueError(f"unknown perturbation {self.kind!r}")


def aligned_on_rank(
    aligned_fn: Callable[..., bool],
    model_fn: Callable[[], nn.Module],
    perturbations: Sequence[Perturb] = (),
    in_features: int | None = None,
) -> tuple[object, bool]:
    """Build identical replicas, optionally warm BatchNorm buffers identically, apply
    ``perturbations``, and call ``aligned_fn(model)``.

    Returns (the function's result, whether the model was left untouched by the call).
    """
    model = model_fn()
    if in_features is not None:
        g = torch.Generator().manual_seed(77)
        with torch.no_grad():
            model.train()
            model(torch.randn(6, in_features, generator=g))
    for p in perturbations:
        p.apply(model)
    before = state_of(model)
    result = aligned_fn(model)
    untouched = all(torch.equal(before[n], t) for n, t in state_of(model).items())
    return result, untouched


def wrapped_gradients_on_rank(
    wrapper_cls: Callable[..., nn.Module], model_fn: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor
) -> tuple[dict, dict]:
    """Backward on this rank's shard through a plain replica and through ``wrapper_cls(model_fn())``.

    Returns (the plain replica's local gradients, the wrapped module's gradients after
    ``loss.backward()``). ``model_fn`` should build the same model on every rank.
    """
    xs, ys = rank_shard(x, y)
    local = model_fn()
    mse(local(xs), ys).backward()
    model = model_fn()
    wrapped = wrapper_cls(model)
    model.zero_grad(set_to_none=True)
    mse(wrapped(xs), ys).backward()
    return grads_of(local), grads_of(model)


def train_wrapped(
    wrapper_cls: Callable[..., nn.Module],
    model_fn: Callable[[], nn.Module],
    batches: Sequence[Batch],
    lr: float,
    momentum: float = 0.0,
    group: dist.ProcessGroup | None = None,
) -> State:
    """Data-parallel SGD with ``wrapper_cls(model)`` (``wrapper_cls(model, group=group)`` on a subgroup).

    Call inside ``run`` on every rank of ``group``. Each rank builds ``model_fn()``, wraps it, and per
    global batch clears the gradients, runs forward and backward on its :func:`rank_shard` (by rank in
    ``group``) through the wrapper and takes one SGD step. Returns the module's :func:`tensors_of`.
    """
    model = model_fn()
    wrapped = wrapper_cls(model) if group is None else wrapper_cls(model, group=group)
    opt = torch.optim.SGD(wrapped.parameters(), lr=lr, momentum=momentum)
    for x, y in batches:
        xs, ys = rank_shard(x, y, group)
        opt.zero_grad(set_to_none=True)
        mse(wrapped(xs), ys).backward()
        opt.step()
    return tensors_of(model)
