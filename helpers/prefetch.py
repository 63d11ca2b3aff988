"""Lesson 08, prefetching: the forward schedule with prefetch depth, live memory, drivers, checks.

FULL_SHARD forward over units ``0..U-1`` with prefetch depth ``d``:

* the all-gathers share one channel and run one at a time, in unit order; the all-gather of
  unit ``v`` is **issued** (its landing buffer allocated) at
  ``I_v = max(F_{v-1}, E_{v-d-1})``: after the previous all-gather has landed and once unit
  ``v-d-1`` has finished computing and been freed (so at most ``d + 1`` units are
  materialised), with ``F_{-1} = E_{k<0} = 0``;
* it **lands** (its wait can complete) at ``F_v = I_v + gather_s[v]``;
* unit ``v`` computes from ``S_v = max(E_{v-1}, F_v)`` to ``E_v = S_v + compute_s[v]`` and
  is freed at ``E_v``.

Memory on one rank: the shards of every unit always, unit ``v``'s full parameters from
``I_v`` to ``E_v`` (the landing buffer exists from the moment its transfer starts, before
any data has landed; code that enqueues several all-gathers at once allocates their
buffers even earlier, at enqueue time, within the same ``d + 1`` bound),
and unit ``v``'s activations from ``S_v`` to the end of forward (backward needs them).
Times are seconds, sizes bytes.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.checks import rounded
from helpers.param_sharding import ReferenceShardedUnit, layered_mlp
from helpers.slow_network import SlowNetwork

Schedule = list[tuple[float, float, float, float]]  # (issue, landed, compute start, compute end) per unit


# --------------------------------------------------------------------------- references


def prefetch_schedule(gather_s: Sequence[float], compute_s: Sequence[float], depth: int) -> Schedule:
    """``(I_v, F_v, S_v, E_v)`` for every unit; see the module docstring."""
    out: Schedule = []
    for v in range(len(gather_s)):
        previous_landed = out[v - 1][1] if v > 0 else 0.0
        freed = out[v - depth - 1][3] if v - depth - 1 >= 0 else 0.0
        issue = max(previous_landed, freed)
        landed = issue + gather_s[v]
        start = max(out[v - 1][3] if v > 0 else 0.0, landed)
        out.append((issue, landed, start, start + compute_s[v]))
    return out


def peak_live_bytes(schedule: Schedule, unit_bytes: Sequence[float], activation_bytes: Sequence[float],
                    shard_bytes: float) -> float:
    """Peak bytes on one rank: shards, gathered units on ``[I_v, E_v)``, activations from ``S_v`` on."""
    intervals = [(i, e, b) for (i, _, _, e), b in zip(schedule, unit_bytes)]
    intervals += [(s, float("inf"), b) for (_, _, s, _), b in zip(schedule, activation_bytes)]
    peak = 0.0
    for t, _, _ in intervals:  # the live total only rises when something is allocated
        live = sum(b for start, end, b in intervals if start <= t < end)
        peak = max(peak, live)
    return shard_bytes + peak


def exposed_communication(schedule: Schedule, compute_s: Sequence[float]) -> float:
    """Seconds of forward not spent computing: the end of the last unit minus the total compute."""
    return schedule[-1][3] - sum(compute_s) if schedule else 0.0


def max_prefetch_depth(gather_s: Sequence[float], compute_s: Sequence[float], unit_bytes: Sequence[float],
                       activation_bytes: Sequence[float], shard_bytes: float, budget_bytes: float) -> int | None:
    """The largest depth in ``0..U-1`` whose peak fits the budget, ``None`` if none does."""
    best = None
    for depth in range(len(gather_s)):
        peak = peak_live_bytes(prefetch_schedule(gather_s, compute_s, depth), unit_bytes, activation_bytes,
                               shard_bytes)
        if peak <= budget_bytes:
            best = depth
    return best


def blocked_waiting_s(trace: Sequence[tuple[str, int, float]]) -> float:
    """Exposed communication measured from a trace: seconds the CPU spent inside ``wait()``.

    ``trace`` holds ``(event, unit, perf_counter seconds)`` with events ``issue_call``,
    ``issue_return``, ``wait_call``, ``wait_return``, ``compute_start``, ``compute_end``.
    The time an ``async_op=True`` call takes to return is enqueueing, not communication.
    One forward pass per trace: each unit has one ``wait_call`` and one ``wait_return``.
    """
    calls = {(u, "wait_call"): t for e, u, t in trace if e == "wait_call"}
    return sum(t - calls[(u, "wait_call")] for e, u, t in trace if e == "wait_return")


# --------------------------------------------------------------------------- a unit with asynchronous gathers


class AsyncShardedUnit(ReferenceShardedUnit):
    """:class:`ReferenceShardedUnit` without its hooks: the caller decides when to gather.

    ``issue_gather()`` allocates the full buffer and launches the all-gather with
    ``async_op=True``, returning the handle; ``free()`` releases the buffer. ``module`` runs
    with whatever the buffer holds, so computing before the handle's ``wait()`` is a bug
    that :class:`SlowNetwork` makes visible.
    """

    def __init__(self, module: nn.Module, group: Any = None) -> None:
        self.pending: Any = None
        super().__init__(module, group)
        for hooks in (module._forward_pre_hooks, module._forward_hooks):
            hooks.clear()
        module.register_forward_pre_hook(lambda m, args: self._check_landed("computed"))

    def _check_landed(self, what: str) -> None:
        if self.pending is not None and not self.pending.is_completed():
            raise RuntimeError(f"a unit was {what} before its all-gather's wait() returned: its landing buffer "
                               f"does not hold the parameters yet. Wait on the handle issue_gather() returned first.")

    def issue_gather(self) -> Any:
        storage = self.full.untyped_storage()
        if storage.nbytes() == 0:
            storage.resize_(self.full.numel() * self.full.element_size())
        self.full.zero_()  # a landing buffer holds no parameters until the all-gather lands
        self.pending = dist.all_gather_single(self.full, self.shard.detach(), group=self.group, async_op=True)
        return self.pending

    def free(self) -> None:
        self._check_landed("freed")
        super().free()

    @property
    def gathered(self) -> bool:
        return self.full.untyped_storage().nbytes() > 0


def unit_stack(widths: Sequence[int]) -> nn.Sequential:
    """Linear layers with ReLUs between them, each (Linear, ReLU) pair one child: every child is a unit."""
    mlp = layered_mlp(widths)
    layers = list(mlp)
    return nn.Sequential(*[nn.Sequential(*layers[i:i + 2]) for i in range(0, len(layers), 2)])


def forward_on_rank(forward_fn: Callable[..., torch.Tensor], widths: Sequence[int], x: torch.Tensor, depth: int,
                    slow: bool = True) -> dict[str, Any]:
    """Shard :func:`unit_stack` into :class:`AsyncShardedUnit` s and run ``forward_fn(units, x, depth)``.

    Records, at every unit's computation, which units were materialised (gathered and not
    yet freed). Returns the output, the unsharded model's output, those lists, and how many
    bytes of full parameters were left allocated afterwards.
    """
    torch.manual_seed(0)
    model = unit_stack(widths)
    with torch.no_grad():
        expected = model(x)
    units = [AsyncShardedUnit(m) for m in model]
    materialised: list[list[int]] = []
    for m in model:
        m.register_forward_pre_hook(lambda mod, args: materialised.append(
            [j for j, u in enumerate(units) if u.gathered]))
    with torch.no_grad(), (SlowNetwork() if slow else nullcontext()):
        out = forward_fn(units, x, depth)
    leftover = sum(u.full.untyped_storage().nbytes() for u in units)
    return {"out": out, "expected": expected, "materialised": materialised, "leftover": leftover}


def reference_forward(units: Sequence[AsyncShardedUnit], x: torch.Tensor, depth: int) -> torch.Tensor:
    """Prefetching forward: keep units ``k..k+depth`` issued, wait, compute, free (the exercise's contract)."""
    handles: dict[int, Any] = {}
    for k, unit in enumerate(units):
        for v in range(k, min(k + depth, len(units) - 1) + 1):
            if v not in handles:
                handles[v] = units[v].issue_gather()
        handles.pop(k).wait()
        x = unit.module(x)
        unit.free()
    return x


# --------------------------------------------------------------------------- checks


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def assert_schedule(fn: Callable[..., Schedule], cases: Sequence[tuple[Sequence[float], Sequence[float], int]]) -> None:
    """``fn`` returns :func:`prefetch_schedule` on every case."""
    for gather_s, compute_s, depth in cases:
        exp = prefetch_schedule(gather_s, compute_s, depth)
        got = fn(list(gather_s), list(compute_s), depth)
        try:
            ok = len(got) == len(exp) and all(_close(float(g), e) for gt, et in zip(got, exp) for g, e in zip(gt, et))
        except TypeError:
            ok = False
        if not ok:
            hint = ""
            unlimited = prefetch_schedule(gather_s, compute_s, len(gather_s))
            if depth < len(gather_s) - 1 and _issues_match(got, unlimited):
                hint = (f" The all-gathers were issued as soon as the channel was free: depth {depth} allows one only "
                        f"once unit v-{depth}-1 has been freed (at most {depth + 1} materialised units).")
            raise AssertionError(f"prefetch_schedule(gather_s={list(gather_s)}, compute_s={list(compute_s)}, "
                                 f"depth={depth}) returned {rounded(got, 6)}, expected {rounded(exp, 6)}.{hint}")


def _issues_match(got: Any, schedule: Schedule) -> bool:
    """Whether ``got`` (a student's return value, maybe malformed) has ``schedule``'s issue times."""
    try:
        return len(got) == len(schedule) and all(_close(float(g[0]), u[0]) for g, u in zip(got, schedule))
    except (TypeError, IndexError, ValueError):
        return False


def assert_peak(fn: Callable[..., float], cases: Sequence[tuple]) -> None:
    """``fn(schedule, unit_bytes, activation_bytes, shard_bytes)`` equals :func:`peak_live_bytes`."""
    for gather_s, compute_s, depth, unit_bytes, act, shards in cases:
        sched = prefetch_schedule(gather_s, compute_s, depth)
        exp = peak_live_bytes(sched, unit_bytes, act, shards)
        got = fn(sched, list(unit_bytes), list(act), shards)
        if not isinstance(got, (int, float)) or not _close(got, exp):
            hint = ""
            late = peak_live_bytes([(f, f, st, e) for (_, f, st, e) in sched], unit_bytes, act, shards)
            if isinstance(got, (int, float)) and _close(got, late) and not _close(late, exp):
                hint = (" That counts a unit's buffer only once its all-gather landed: the landing buffer is "
                        "allocated when the all-gather is issued.")
            elif isinstance(got, (int, float)) and got < exp and _close(got, shards + max(unit_bytes)):
                hint = " That is the steady state of one gathered unit; prefetched units and activations add to it."
            raise AssertionError(f"peak_live_bytes for depth {depth} (unit_bytes={list(unit_bytes)}, "
                                 f"activation_bytes={list(act)}, shard_bytes={shards}) returned {got!r}, expected "
                                 f"{exp:g}.{hint}")


def assert_exposed(fn: Callable[..., float], cases: Sequence[tuple[Sequence[float], Sequence[float], int]]) -> None:
    """``fn(schedule, compute_s)`` equals :func:`exposed_communication`."""
    for gather_s, compute_s, depth in cases:
        sched = prefetch_schedule(gather_s, compute_s, depth)
        exp, got = exposed_communication(sched, compute_s), fn(sched, list(compute_s))
        if not isinstance(got, (int, float)) or not _close(got, exp):
            raise AssertionError(f"exposed_communication for gather_s={list(gather_s)}, compute_s={list(compute_s)}, "
                                 f"depth={depth} returned {got!r}, expected {exp:g} s.")


def assert_max_depth(fn: Callable[..., int | None], cases: Sequence[tuple]) -> None:
    """``fn`` equals :func:`max_prefetch_depth` on every case."""
    for case in cases:
        exp, got = max_prefetch_depth(*case), fn(*[list(c) if isinstance(c, tuple) else c for c in case])
        if got != exp:
            gather_s, compute_s, unit_bytes, act, shards, budget = case
            peaks = [peak_live_bytes(prefetch_schedule(gather_s, compute_s, d), unit_bytes, act, shards)
                     for d in range(len(gather_s))]
            raise AssertionError(f"max_prefetch_depth with budget {budget:g} returned {got!r}, expected {exp!r} "
                                 f"(peak per depth: {[round(p) for p in peaks]}).")


def synthetic_trace(enqueue_s: Sequence[float], blocked_s: Sequence[float], compute_s: Sequence[float]
                    ) -> list[tuple[str, int, float]]:
    """A trace of a depth-1 forward: per unit, how long the async call took to return and the wait blocked."""
    t, trace = 0.0, []
    for u in range(len(compute_s)):
        trace += [("issue_call", u, t), ("issue_return", u, t + enqueue_s[u])]
        t += enqueue_s[u]
        trace += [("wait_call", u, t), ("wait_return", u, t + blocked_s[u])]
        t += blocked_s[u]
        trace += [("compute_start", u, t), ("compute_end", u, t + compute_s[u])]
        t += compute_s[u]
    return trace


def assert_blocked(fn: Callable[..., float], traces: Sequence[list[tuple[str, int, float]]]) -> None:
    """``fn(trace)`` equals :func:`blocked_waiting_s`."""
    for trace in traces:
        exp, got = blocked_waiting_s(trace), fn(list(trace))
        if not isinstance(got, (int, float)) or not _close(got, exp):
            enqueue = sum(t for e, u, t in trace if e == "issue_return") - sum(t for e, u, t in trace
                                                                                 if e == "issue_call")
            hint = (" That is the time the async calls took to return: enqueueing, not communication."
                    if isinstance(got, (int, float)) and _close(got, enqueue) else "")
            raise AssertionError(f"blocked_waiting_s returned {got!r}, expected {exp:g} s.{hint}")


def assert_prefetching_forward(results: Sequence[dict[str, Any]], depth: int, num_units: int) -> None:
    """Outputs equal the unsharded model; at most ``depth + 1`` units live, and prefetch happened; all freed."""
    for rank, r in enumerate(results):
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
        if r["leftover"]:
            raise AssertionError(f"rank {rank}: {r['leftover']} bytes of full parameters left allocated after forward.")
