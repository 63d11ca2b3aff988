"""Lesson 08, prefetching: a forward-only sharded unit with asynchronous gathers, a driver and a check.

:class:`PrefetchUnit` is the unit the assignment's prefetching forward drives. It is laid out
like FSDP2 (``fully_shard``), not like lesson 07's flat unit: every parameter is sharded along
dimension 0 (rows padded to a multiple of ``N``), rank ``r`` keeps block ``r`` of the rows of
every parameter, and ``issue_gather()`` launches one ``async_op=True`` all-gather of those
blocks into a **landing buffer**; the unit's forward pre-hook copies the landed rows into the
module's parameters. It has no backward: no re-gather, no gradient reduction.

:class:`StorageMeter` measures the bytes those units really allocate (read from their tensors'
storages at every allocation); :class:`ModelledClock` gives code that drives them a
deterministic clock: the lesson's timing model (one channel, compute and wait times) applied to
the calls the code actually makes, in the order it makes them, so timing claims do not depend on
the load of the machine.

:func:`forward_on_rank` runs a student's forward over such units on a gloo rank (inside
:class:`helpers.runtime.slow_network.SlowNetwork`, where an asynchronous all-gather lands only when it
is waited on) and records which units were materialised while each unit computed, the peak of
allocated bytes and, with modelled timings, the trace of the clock;
:func:`assert_prefetching_forward` checks that record. Times are seconds, sizes bytes.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.l07_parameter_sharding import layered_mlp
from helpers.runtime.slow_network import SlowNetwork


class StorageMeter:
    """Bytes of full parameters (landing buffers and module parameters) that a list of units holds.

    ``units`` register themselves (``PrefetchUnit(..., meter=meter)``); every ``issue_gather()``
    calls :meth:`sample`, which reads the live bytes from the tensors' storages. Live bytes only
    rise at an allocation, so ``peak`` is the largest number of bytes ever allocated at once, and
    ``unit_bytes[v]`` what unit ``v`` holds when gathered.
    """

    def __init__(self) -> None:
        self.units: list[PrefetchUnit] = []
        self.peak = 0
        self.unit_bytes: dict[int, int] = {}

    @property
    def live(self) -> int:
        """Bytes allocated now, summed over the units."""
        return sum(u.allocated_bytes for u in self.units)

    def sample(self) -> None:
        """Record the live bytes (and each gathered unit's bytes) after an allocation."""
        self.peak = max(self.peak, self.live)
        for v, u in enumerate(self.units):
            self.unit_bytes[v] = max(self.unit_bytes.get(v, 0), u.allocated_bytes)


class ModelledClock:
    """Deterministic time for code that drives :class:`PrefetchUnit` s (seconds, not measured).

    The lesson's timing model applied to the calls the code makes: an all-gather issued at time
    ``now`` waits for the one channel (until the previously issued all-gather has landed), then
    takes ``gather_s[v]``; ``wait()`` on its handle returns at ``max(now, landed)``; computing unit
    ``v``'s module takes ``compute_s[v]``; :meth:`spend` models other work. Issuing costs no time:
    it only enqueues. ``trace`` holds ``(event, unit, seconds)`` with the events of exercise 2
    (``issue_call``, ``issue_return``, ``wait_call``, ``wait_return``, ``compute_start``,
    ``compute_end``) in the order they happened.
    """

    def __init__(self, gather_s: Sequence[float], compute_s: Sequence[float]) -> None:
        self.gather_s, self.compute_s = list(gather_s), list(compute_s)
        self.now = self.channel_free = 0.0
        self.landed: dict[int, float] = {}
        self.trace: list[tuple[str, int, float]] = []

    def attach(self, units: Sequence["PrefetchUnit"]) -> None:
        """Time ``units`` (unit ``v`` is ``units[v]``): their all-gathers, waits and computations."""
        for v, unit in enumerate(units):
            unit.clock, unit.index = self, v
            unit.module.register_forward_pre_hook(lambda m, args, v=v: self._record("compute_start", v))
            unit.module.register_forward_hook(lambda m, args, out, v=v: self.spend(self.compute_s[v], "compute_end", v))

    def _record(self, event: str, v: int) -> None:
        self.trace.append((event, v, self.now))

    def spend(self, seconds: float, event: str | None = None, v: int = -1) -> None:
        """Advance the clock by ``seconds`` of work (recorded as ``event`` of unit ``v`` if given)."""
        self.now += seconds
        if event:
            self._record(event, v)

    def issued(self, v: int) -> None:
        """Unit ``v``'s all-gather was enqueued now; it lands once the channel has carried it."""
        self._record("issue_call", v)
        self.channel_free = self.landed[v] = max(self.now, self.channel_free) + self.gather_s[v]
        self._record("issue_return", v)

    def waited(self, v: int) -> None:
        """A wait on unit ``v``'s handle returned: not before its all-gather landed."""
        self._record("wait_call", v)
        self.now = max(self.now, self.landed[v])
        self._record("wait_return", v)


class _ClockedHandle:
    """An all-gather's handle whose ``wait()`` also moves a :class:`ModelledClock`."""

    def __init__(self, work: Any, unit: "PrefetchUnit") -> None:
        self.work, self.unit = work, unit

    def wait(self, timeout: Any = None) -> bool:
        self.work.wait()
        self.unit.clock.waited(self.unit.index)
        return True

    def is_completed(self) -> bool:
        return self.work.is_completed()


class PrefetchUnit:
    """A forward-only unit sharded along dimension 0 (FSDP2's layout); see the module docstring.

    ``issue_gather()`` allocates the landing buffer and the module's parameters, zeroes the
    buffer and launches the all-gather with ``async_op=True``, returning its handle; ``free()``
    releases both. Computing or freeing before the handle's ``wait()`` returned raises
    ``RuntimeError``: the landing buffer does not hold the parameters yet. With a ``meter``
    (:class:`StorageMeter`) every allocation is measured; :meth:`ModelledClock.attach` times it.
    """

    def __init__(self, module: nn.Module, group: Any = None, meter: StorageMeter | None = None) -> None:
        self.module, self.group, self.params = module, group, list(module.parameters())
        self.meter, self.clock, self.index = meter, None, -1
        if meter is not None:
            meter.units.append(self)
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
        if self.meter is not None:
            self.meter.sample()
        self.landing.zero_()  # a landing buffer holds no parameters until the all-gather lands
        self.pending = dist.all_gather_single(self.landing, self.shard, group=self.group, async_op=True)
        if self.clock is not None:
            self.clock.issued(self.index)
            self.pending = _ClockedHandle(self.pending, self)
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


def unit_sizes(widths: Sequence[int], world_size: int) -> tuple[list[float], float]:
    """Bytes of each :func:`unit_stack` unit when gathered (its landing buffer and its module's parameters) and of
    one rank's shards of all units, as :class:`PrefetchUnit` lays them out on ``world_size`` ranks (float32)."""
    unit_bytes, shard_bytes = [], 0.0
    for unit in unit_stack(widths):
        shard = sum(-(-p.shape[0] // world_size) * (p.numel() // p.shape[0]) for p in unit.parameters())
        unit_bytes.append(4.0 * (world_size * shard + sum(p.numel() for p in unit.parameters())))
        shard_bytes += 4.0 * shard
    return unit_bytes, shard_bytes


def forward_on_rank(forward_fn: Callable[..., torch.Tensor], widths: Sequence[int], x: torch.Tensor, depth: int,
                    slow: bool = True, timings: tuple[Sequence[float], Sequence[float]] | None = None
                    ) -> dict[str, Any]:
    """Shard :func:`unit_stack` into :class:`PrefetchUnit` s and run ``forward_fn(units, x, depth)``.

    Records, at every unit's computation, which units were materialised (gathered and not
    yet freed) and, with ``slow`` (where an all-gather completes only when waited on), which
    of them were still in flight (issued, not yet waited on). Measures with a
    :class:`StorageMeter` the peak bytes of full parameters allocated at once (``peak_bytes``),
    each unit's bytes when gathered (``unit_bytes``) and the shards' bytes (``shard_bytes``).
    With ``timings = (gather_s, compute_s)`` a :class:`ModelledClock` times the run (``trace``,
    modelled seconds). Returns those, the output, the unsharded model's output, and how many
    bytes of full parameters were left allocated afterwards.
    """
    torch.manual_seed(0)
    model = unit_stack(widths)
    with torch.no_grad():
        expected = model(x)
    meter = StorageMeter()
    units = [PrefetchUnit(m, meter=meter) for m in model]
    clock = None if timings is None else ModelledClock(*timings)
    if clock is not None:
        clock.attach(units)
    materialised: list[list[int]] = []
    in_flight: list[list[int]] = []
    for m in model:
        m.register_forward_pre_hook(lambda mod, args: materialised.append(
            [j for j, u in enumerate(units) if u.gathered]))
        m.register_forward_pre_hook(lambda mod, args: in_flight.append(
            [j for j, u in enumerate(units) if u.gathered and not u.pending.is_completed()]))
    with torch.no_grad(), (SlowNetwork() if slow else nullcontext()):
        out = forward_fn(units, x, depth)
    return {"out": out, "expected": expected, "materialised": materialised,
            "in_flight": in_flight if slow else None, "leftover": meter.live, "peak_bytes": meter.peak,
            "unit_bytes": [meter.unit_bytes.get(v, 0) for v in range(len(units))],
            "shard_bytes": sum(u.shard.untyped_storage().nbytes() for u in units),
            "trace": None if clock is None else clock.trace}


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
            raise AssertionError(f"rank {rank}, depth {depth}: the output differs from the unsharded model: "
                                 f"was a unit computed before its all-gather's wait() returned (a landing buffer "
                                 f"holds zeros until then)?")
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
        sizes = r["unit_bytes"]
        bound = max(sum(sizes[k:k + depth + 1]) for k in range(num_units))
        if r["peak_bytes"] > bound:
            raise AssertionError(f"rank {rank}, depth {depth}: at one moment {r['peak_bytes']} bytes of full "
                                 f"parameters were allocated, more than any {depth + 1} consecutive units hold "
                                 f"({bound}): free unit k before issuing unit k+{depth + 1}.")
