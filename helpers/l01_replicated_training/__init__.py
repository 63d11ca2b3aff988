"""Lesson 1, replicated training: the rank-side drivers and the checks of its exercises.

* **rank-side drivers** (``*_on_rank``, :func:`train_wrapped`, :func:`set_rank_gradients`,
  :func:`desync_buffers`): they run *inside* ``helpers.runtime.cluster.run`` on every rank, call a
  student's function (or construct a student's class) the way an exercise's contract says, and
  return plain tensors so that the checks can run in the notebook process;
* **checks** (``assert_*``): student-facing, run in the notebook process on what the drivers
  return; each raises :class:`AssertionError` with a message that says what was expected, what
  was found and, where a common mistake explains the numbers, which mistake it probably is. They
  never print, so a passing check writes nothing (nbgrader scores a cell that writes to stderr 0).

Nothing here computes what an exercise asks for: the float64 references and the real-DDP
training that hidden tests compare against live on the instructor's side
(``autograder.lessons.l01``). Every loss in lesson 1 is the mean squared error over the rows a
rank holds (:func:`helpers.shared.state.mse`). The figures and the all-reduce explorer are in
:mod:`helpers.l01_replicated_training.plots`; the torchrun script in ``launch.py``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.shared.checks import TensorDict, first_difference, scale_between, scale_hint
from helpers.shared.state import Batch, State, grads_of, mse, rank_shard, state_of, tensors_of


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


def assert_all_ranks_return(results: Sequence[object], expected: bool, case: str) -> None:
    """Every rank returned the Python bool ``expected`` (for ``replicas_aligned``)."""
    for rank, r in enumerate(results):
        if type(r) is not bool:
            raise AssertionError(
                f"[{case}] rank {rank} returned {r!r} of type {type(r).__name__}; return a "
                f"Python bool (e.g. bool(flag.item())), the same on every rank."
            )
    if len(set(results)) != 1:
        raise AssertionError(
            f"[{case}] ranks disagree: returned {list(results)} (index = rank). Every rank "
            f"must return the same answer; a rank cannot judge alignment from its own view "
            f"alone, so combine the local verdicts with a collective."
        )
    if results[0] is not expected:
        hint = (" Check every parameter AND every buffer (integer ones too), element by "
                "element: a sum-style checksum misses swapped elements."
                if expected is False else
                " Did your check modify the model or compare tensors that legitimately "
                "differ (e.g. gradients)?")
        raise AssertionError(
            f"[{case}] every rank returned {results[0]}, expected {expected}.{hint}"
        )


def assert_gradients_averaged(
    got_per_rank: Sequence[TensorDict],
    expected: TensorDict,
    world_size: int,
    local_per_rank: Sequence[TensorDict] | None = None,
    atol: float = 1e-6,
    rtol: float = 1e-4,
) -> None:
    """After ``average_gradients``, every rank holds ``expected`` (the mean over ranks).

    ``expected`` maps parameter names to float64 tensors, or ``None`` for parameters that
    must keep ``grad=None``. ``local_per_rank`` (each rank's gradient before averaging)
    lets the message recognise a call that changed nothing.
    """
    for rank, got in enumerate(got_per_rank):
        for name, e in expected.items():
            g = got.get(name)
            if e is None and g is not None:
                raise AssertionError(
                    f"Rank {rank}: parameter {name!r} had grad=None (frozen, or unused by the forward) "
                    f"but has a gradient after your call. Skip parameters whose .grad is None."
                )
            if e is not None and g is None:
                raise AssertionError(f"Rank {rank}: parameter {name!r} lost its gradient.")
            if e is not None and g.shape != e.shape:
                raise AssertionError(
                    f"Rank {rank}: {name!r}.grad has shape {tuple(g.shape)}, expected "
                    f"{tuple(e.shape)}. Reduce each gradient in place; do not reshape it."
                )
    if local_per_rank is not None:
        unchanged = all(
            first_difference(
                {n: got_per_rank[r][n] for n in expected if expected[n] is not None},
                {n: local_per_rank[r][n] for n in expected if expected[n] is not None},
                atol=atol, rtol=rtol,
            ) is None
            for r in range(len(got_per_rank))
        )
        if unchanged:
            raise AssertionError(
                "Every rank still holds its own local gradient: average_gradients did not "
                "change .grad. Averaging the loss value does not average gradients; "
                "all_reduce each parameter's .grad in place."
            )
    for rank in range(1, len(got_per_rank)):
        diff = first_difference(got_per_rank[rank], got_per_rank[0], atol=atol, rtol=rtol)
        if diff is not None:
            raise AssertionError(
                f"After averaging, rank {rank}'s gradients differ from rank 0's: {diff}. "
                f"Every rank must end with the same (mean) gradient."
            )
    for rank, got in enumerate(got_per_rank):
        diff = first_difference(
            {n: got[n] for n in expected if expected[n] is not None},
            {n: v for n, v in expected.items() if v is not None},
            atol=atol, rtol=rtol,
        )
        if diff is not None:
            hint = scale_hint(scale_between(got, expected), world_size)
            raise AssertionError(
                f"Rank {rank}'s gradients are not the mean over {world_size} ranks: {diff}.{hint}"
            )


def assert_states_close(
    got: TensorDict, expected: TensorDict, atol: float, rtol: float, what: str
) -> None:
    """``got`` matches ``expected`` tensor by tensor within tolerances (names must match)."""
    diff = first_difference(got, expected, atol=atol, rtol=rtol)
    if diff is not None:
        raise AssertionError(f"{what}: {diff}")


def assert_broadcast_from(per_rank: Sequence[Mapping[str, object]], src: int) -> None:
    """Check per-rank results of ``reference.broadcast_on_rank``: all ranks now hold rank
    ``src``'s pre-call state, bit for bit, with their parameter objects kept."""
    expected = per_rank[src]["before"]
    for rank, o in enumerate(per_rank):
        assert_parameter_identity(o["ids_before"], o["ids_after"], o["optimizer_moved"])
        diff = first_difference(o["after"], expected)
        if diff is None:
            continue
        buffers = set(o["buffers"])
        params_after = {n: t for n, t in o["after"].items() if n not in buffers}
        params_src = {n: t for n, t in expected.items() if n not in buffers}
        if src != 0 and first_difference(o["after"], per_rank[0]["before"]) is None:
            hint = f" Rank {rank} now holds rank 0's values: broadcast from src={src}, not from 0."
        elif first_difference(o["after"], o["before"]) is None:
            hint = f" Rank {rank}'s model did not change at all."
        elif buffers and first_difference(params_after, params_src) is None:
            hint = (" The parameters match but a buffer does not: broadcast model.buffers() too "
                    "(BatchNorm running statistics, integer counters).")
        else:
            hint = ""
        raise AssertionError(
            f"broadcast_parameters(model, src={src}): afterwards rank {rank} should hold rank "
            f"{src}'s parameters and buffers, but {diff}.{hint}"
        )


def assert_parameter_identity(
    ids_before: Sequence[int], ids_after: Sequence[int], optimizer_moved: bool
) -> None:
    """Parameters are the same Python objects after the call and an earlier optimizer still works."""
    if list(ids_before) != list(ids_after):
        changed = [i for i, (a, b) in enumerate(zip(ids_before, ids_after)) if a != b]
        raise AssertionError(
            f"Parameter objects were replaced (positions {changed} in model.parameters()). "
            f"An optimizer built before the call still holds the old ones and would update "
            f"tensors the model no longer uses. Broadcast into the existing tensors "
            f"(dist.broadcast(p.data, ...)) instead of assigning new nn.Parameters."
        )
    if not optimizer_moved:
        raise AssertionError(
            "An optimizer built before your call no longer updates the model's parameters."
        )


def assert_ring_allreduce_bytes(
    fn: Callable[[int, int, int], float],
    expected: Mapping[tuple[int, int, int], float],
) -> None:
    """``fn(num_elements, bytes_per_element, N)`` equals ``expected[(num_elements, bytes_per_element, N)]``.

    The expected values (bytes each rank sends) are written in the test, or come from the
    instructor's calculator in hidden tests. A mismatch names the classic mistake it looks like.
    """
    for (n, b, w), exp in expected.items():
        got = fn(n, b, w)
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise AssertionError(f"ring_allreduce_bytes{(n, b, w)} returned {got!r}; return a number.")
        if math.isclose(got, exp, rel_tol=1e-9, abs_tol=1e-9):
            continue
        message = n * b
        hint = ""
        if w > 1 and math.isclose(got, (w - 1) / w * message, rel_tol=1e-9):
            hint = (" That is (N-1)/N x bytes: one reduce-scatter only. An all-reduce is a "
                    "reduce-scatter followed by an all-gather, each (N-1)/N x bytes.")
        elif w > 1 and math.isclose(got, 2 * (w - 1) * message, rel_tol=1e-9):
            hint = (" That is 2(N-1) x bytes: each of the 2(N-1) ring steps sends one "
                    "chunk of bytes/N, not the whole message.")
        elif math.isclose(got, 2 * message, rel_tol=1e-9):
            hint = " That is 2 x bytes: the volume is 2(N-1)/N x bytes, which is < 2 x bytes."
        elif math.isclose(got, exp * 8, rel_tol=1e-9) or math.isclose(got, exp / 8, rel_tol=1e-9):
            hint = " Off by a factor of 8: bytes, not bits."
        raise AssertionError(
            f"ring_allreduce_bytes(num_elements={n}, bytes_per_element={b}, world_size={w}) "
            f"returned {got!r}, expected {exp!r}.{hint}"
        )
