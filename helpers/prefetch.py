"""Lesson 08, prefetching: a forward-only sharded unit with asynchronous gathers, a driver and a check.

:class:`PrefetchUnit` is the unit the assignment's prefetching forward drives. It is laid out
like FSDP2 (``fully_shard``), not like lesson 07's flat unit: every parameter is sharded along
dimension 0 (rows padded to a multiple of ``N``), rank ``r`` keeps block ``r`` of the rows of
every parameter, and ``issue_gather()`` launches one ``async_op=True`` all-gather of those
blocks into a **landing buffer**; the unit's forward pre-hook copies the landed rows into the
module's parameters. It has no backward: no re-gather, no gradient reduction.

:func:`forward_on_rank` runs a student's forward over such units on a gloo rank (inside
:class:`helpers.slow_network.SlowNetwork`, where an asynchronous all-gather lands only when it
is waited on) and records which units were materialised while each unit computed;
:func:`assert_prefetching_forward` checks that record. Times are seconds, sizes bytes.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.param_sharding import layered_mlp
from helpers.slow_network import SlowNetwork


class PrefetchUnit:
    """A forward-only unit sharded along dimension 0 (FSDP2's layout); see the module docstring.

    ``issue_gather()`` allocates the landing buffer and the module's parameters, zeroes the
    buffer and launches the all-gather with ``async_op=True``, returning its handle; ``free()``
    releases both. Computing or freeing before the handle's ``wait()`` returned raises
    ``RuntimeError``: the landing buffer does not hold the parameters yet.
    """

    def __init__(self, module: nn.Module, group: Any = None) -> None:
        self.module, self.group, self.params = module, group, list(module.parameters())
        self.world = dist.get_world_size(group)
        rank = dist.get_rank(group)
        self.rows = [-(-p.shape[0] // self.world) for p in self.params]  # rows of each parameter per rank
        blocks = []
        for p, rows in zip(self.params, self.rows):
            padded = torch.zeros(self.world * rows, *p.shape[1:])
            padded[: p.shape[0]] = p.detach()
            blocks.append(padded[rank * rows:(rank + 1) * rows].reshape(-1))
        self.shard = torch.cat(blocks)
        self.landing = torch.empty(self.world * self.shard.numel())
        for p in self.params:
            p.data = torch.empty(p.shape)
        self.pending: Any = None
        module.register_forward_pre_hook(lambda m, args: self._copy_out())
        self._resize(allocate=False)

    def _storages(self) -> list[torch.Tensor]:
        return [self.landing, *self.params]

    def _resize(self, allocate: bool) -> None:
        for t in self._storages():
            t.untyped_storage().resize_(t.numel() * t.element_size() if allocate else 0)

    def _check_landed(self, what: str) -> None:
        if self.pending is not None and not self.pending.is_completed():
            raise RuntimeError(f"a unit was {what} before its all-gather's wait() returned: its landing buffer "
                               f"does not hold the parameters yet. Wait on the handle issue_gather() returned first.")

    def _copy_out(self) -> None:
        """Fill the module's parameters from the landed rows (rank-major blocks in the landing buffer)."""
        if not self.gathered:
            raise RuntimeError("a unit was computed before issue_gather(): it holds only its shard.")
        self._check_landed("computed")
        per_rank = self.landing.view(self.world, -1)
        offset = 0
        with torch.no_grad():
            for p, rows in zip(self.params, self.rows):
                size = rows * (p.numel() // p.shape[0])
                p.copy_(per_rank[:, offset:offset + size].reshape(self.world * rows, *p.shape[1:])[: p.shape[0]])
                offset += size

    def issue_gather(self) -> Any:
        """Allocate the landing buffer and launch the asynchronous all-gather; return its handle."""
        self._resize(allocate=True)
        self.landing.zero_()  # a landing buffer holds no parameters until the all-gather lands
        self.pending = dist.all_gather_single(self.landing, self.shard, group=self.group, async_op=True)
        return self.pending

    def free(self) -> None:
        """Release the landing buffer and the module's parameters."""
        self._check_landed("freed")
        self._resize(allocate=False)

    @property
    def gathered(self) -> bool:
        """Whether the unit's full parameters are allocated (issued and not yet freed)."""
        return self.landing.untyped_storage().nbytes() > 0

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the landing buffer and the module's parameters currently allocated."""
        return sum(t.untyped_storage().nbytes() for t in self._storages())


def unit_stack(widths: Sequence[int]) -> nn.Sequential:
    """Linear layers with ReLUs between them, each (Linear, ReLU) pair one child: every child is a unit."""
    layers = list(layered_mlp(widths))
    return nn.Sequential(*[nn.Sequential(*layers[i:i + 2]) for i in range(0, len(layers), 2)])


def forward_on_rank(forward_fn: Callable[..., torch.Tensor], widths: Sequence[int], x: torch.Tensor, depth: int,
                    slow: bool = True) -> dict[str, Any]:
    """Shard :func:`unit_stack` into :class:`PrefetchUnit` s and run ``forward_fn(units, x, depth)``.

    Records, at every unit's computation, which units were materialised (gathered and not
    yet freed) and, with ``slow`` (where an all-gather completes only when waited on), which
    of them were still in flight (issued, not yet waited on). Returns the output, the
    unsharded model's output, those lists, and how many bytes of full parameters were left
    allocated afterwards.
    """
    torch.manual_seed(0)
    model = unit_stack(widths)
    with torch.no_grad():
        expected = model(x)
    units = [PrefetchUnit(m) for m in model]
    materialised: list[list[int]] = []
    in_flight: list[list[int]] = []
    for m in model:
        m.register_forward_pre_hook(lambda mod, args: materialised.append(
            [j for j, u in enumerate(units) if u.gathered]))
        m.register_forward_pre_hook(lambda mod, args: in_flight.append(
            [j for j, u in enumerate(units) if u.gathered and not u.pending.is_completed()]))
    with torch.no_grad(), (SlowNetwork() if slow else nullcontext()):
        out = forward_fn(units, x, depth)
    leftover = sum(u.allocated_bytes for u in units)
    return {"out": out, "expected": expected, "materialised": materialised,
            "in_flight": in_flight if slow else None, "leftover": leftover}


def synthetic_trace(enqueue_s: Sequence[float], blocked_s: Sequence[float], compute_s: Sequence[float],
                    gap_s: Sequence[float] | None = None) -> list[tuple[str, int, float]]:
    """A trace of a depth-1 forward: per unit, how long the async call took to return and the wait blocked.

    ``gap_s[u]``: seconds between unit ``u``'s ``wait_return`` and its ``compute_start`` (other
    work in between; default 0). Events are listed in time order.
    """
    t, trace = 0.0, []
    for u in range(len(compute_s)):
        trace += [("issue_call", u, t), ("issue_return", u, t + enqueue_s[u])]
        t += enqueue_s[u]
        trace += [("wait_call", u, t), ("wait_return", u, t + blocked_s[u])]
        t += blocked_s[u] + (gap_s[u] if gap_s else 0.0)
        trace += [("compute_start", u, t), ("compute_end", u, t + compute_s[u])]
        t += compute_s[u]
    return trace


def assert_prefetching_forward(results: Sequence[dict[str, Any]], depth: int, num_units: int,
                               ledger: Any = None) -> None:
    """Outputs equal the unsharded model; units ``k..k+depth`` live and ``k+1..`` in flight; all freed.

    With a ``ledger`` (``run(..., ledger=True)``), every rank issued exactly one all-gather per unit.
    """
    for rank in range(0 if ledger is None else ledger.world_size):
        gathers = ledger.count("all_gather_single", rank)
        if gathers != num_units:
            raise AssertionError(f"rank {rank}, depth {depth}: {gathers} all-gathers for {num_units} units; issue "
                                 f"each unit's all-gather exactly once (a unit already in flight is not issued again).")
    for rank, r in enumerate(results):
        if not isinstance(r["out"], torch.Tensor) or r["out"].shape != r["expected"].shape:
            raise AssertionError(f"rank {rank}, depth {depth}: the forward returned {type(r['out']).__name__}, not "
                                 f"the output tensor of shape {tuple(r['expected'].shape)}.")
        if not torch.allclose(r["out"], r["expected"], atol=1e-6, rtol=1e-5):
            raise AssertionError(f"rank {rank}, depth {depth}: the output differs from the unsharded model: was a unit "
                                 f"computed before its all-gather's wait() returned (a landing buffer holds zeros until "
                                 f"then)?")
        for u, live in enumerate(r["materialised"]):
            expected = list(range(u, min(u + depth, num_units - 1) + 1))
            if len(live) > depth + 1:
                raise AssertionError(f"rank {rank}: when unit {u} computed, units {live} were materialised: more than "
                                     f"depth + 1 = {depth + 1} exceeds the memory budget the depth stands for.")
            if live != expected:
                raise AssertionError(f"rank {rank}, depth {depth}: when unit {u} computed, units {live} were "
                                     f"materialised; expected {expected} (unit {u} and the next {depth} prefetched, "
                                     f"every earlier one freed).")
        for u, flying in enumerate(r["in_flight"] or []):
            expected = list(range(u + 1, min(u + depth, num_units - 1) + 1))
            if flying != expected:
                raise AssertionError(f"rank {rank}, depth {depth}: when unit {u} computed, the all-gathers of units "
                                     f"{flying} were still in flight; expected {expected}. Wait only on unit {u}'s "
                                     f"handle: waiting on the prefetched ones first leaves nothing to overlap with "
                                     f"the computation.")
        if len(r["materialised"]) != num_units:
            raise AssertionError(f"rank {rank}: {len(r['materialised'])} units computed, expected {num_units}.")
        if r["leftover"]:
            raise AssertionError(f"rank {rank}: {r['leftover']} bytes of full parameters left allocated after "
                                 f"forward.")
