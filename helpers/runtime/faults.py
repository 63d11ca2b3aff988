"""Fault injection for lesson 10: kill, freeze or stall chosen ranks at a chosen point of a run.

    >>> report = run_with_faults(train, world_size=3, faults=[kill(rank=1, at="batch", count=4)])
    >>> print(report)            # what every rank saw, and after how many seconds

A fault fires the ``count``-th time rank ``rank`` reaches the point ``at``:

* ``at="collective"``: a call from Python of one of the public ``torch.distributed``
  collective functions (``dist.all_reduce``, ``dist.barrier``, ...: :data:`helpers.runtime.ledger.COLLECTIVES`),
  looked up on the module when called. Collectives that C++ issues are not counted:
  DDP's reducer all-reduces its gradient buckets without calling ``dist.all_reduce``;
* any other name: a *course hook*, :func:`point` called with that name by the code that
  runs on the rank (the lesson's data stream calls ``point("batch")`` once per batch).

``kill`` ends the rank's process with SIGKILL, as the kernel's OOM killer would: the
operating system closes its sockets, so its peers' next collective fails within
milliseconds. ``freeze`` stops it with SIGSTOP: its sockets stay open, as those of a node
that lost power or its network do, so its peers wait until a timeout. ``stall`` makes it
sleep (a hung worker: its peers wait in the next collective); ``fail`` raises
:class:`InjectedFault` (a Python error on that rank only).

:func:`run_with_faults` calls :func:`helpers.runtime.cluster.run`, whose bounded waits and
teardown apply. Its ``timeout`` is a watchdog in the caller, not the process group's: the
ranks' group waits up to an hour, so a function that wants the group's own timeout to end
a wait creates a group with one (``dist.new_group(timeout=timedelta(seconds=5))``). After
a fault the group is torn down and the next ``run`` starts fresh processes (nothing of the
old group survives, which is why a restart must come from a checkpoint). Every rank writes
what it saw (finished, raised what, or hit the fault, and when) to a file of the report
directory before it returns, stops or dies, so the survivors' view is known even when the
call as a whole fails. Times are seconds since the rank started the function.

:func:`arm_from_env` arms the same faults in a process launched by ``torchrun``.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch.distributed as dist

from helpers.runtime import hooks, remote

__all__ = ["Fault", "kill", "freeze", "stall", "fail", "point", "InjectedFault", "RankView", "FaultReport",
           "run_with_faults", "arm_from_env", "FAULT_ENV"]

ACTIONS = ("kill", "freeze", "stall", "fail")
COLLECTIVE = "collective"
FAULT_ENV = "COURSE_FAULT"  # "action:rank:at:count", read by arm_from_env


class InjectedFault(RuntimeError):
    """Raised on a rank by a ``fail`` fault."""


@dataclass(frozen=True)
class Fault:
    """Do ``action`` on rank ``rank`` the ``count``-th time (1-based) it reaches point ``at``.

    ``stall_s`` is how long a ``stall`` sleeps (seconds); the run's timeout ends it sooner.
    """

    action: str
    rank: int
    at: str
    count: int = 1
    stall_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if self.count < 1:
            raise ValueError(f"count is 1-based, got {self.count}")

    def describe(self) -> str:
        where = "collective" if self.at == COLLECTIVE else f"hook {self.at!r}"
        return f"{self.action} rank {self.rank} at {where} #{self.count}"


def kill(rank: int, at: str, count: int = 1) -> Fault:
    """SIGKILL rank ``rank`` the ``count``-th time it reaches ``at``."""
    return Fault("kill", rank, at, count)


def freeze(rank: int, at: str, count: int = 1) -> Fault:
    """SIGSTOP rank ``rank`` the ``count``-th time it reaches ``at``: a lost node, seen from its peers.

    The process stops but stays alive, so the kernel closes none of its sockets: its peers get
    silence, not an error, as from a node that lost power or its network. Only a timeout ends
    their wait. :func:`helpers.runtime.cluster.run` kills the stopped process when it tears the group
    down (SIGKILL ends a stopped process too).
    """
    return Fault("freeze", rank, at, count)


def stall(rank: int, at: str, count: int = 1, seconds: float = 3600.0) -> Fault:
    """Make rank ``rank`` sleep ``seconds`` the ``count``-th time it reaches ``at``."""
    return Fault("stall", rank, at, count, seconds)


def fail(rank: int, at: str, count: int = 1) -> Fault:
    """Raise :class:`InjectedFault` on rank ``rank`` the ``count``-th time it reaches ``at``."""
    return Fault("fail", rank, at, count)


# --------------------------------------------------------------------------- the rank side

class _Armed:
    """The faults armed in this process, the counts of each point, where to report."""

    def __init__(self) -> None:
        self.faults: list[Fault] = []
        self.counts: dict[str, int] = {}
        self.report_path: str | None = None
        self.start = time.monotonic()
        self.counting = False  # an observer of collectives is registered


_armed = _Armed()


def point(name: str) -> None:
    """A course hook: code running on a rank calls it at a named point (e.g. once per batch).

    Does nothing unless a fault is armed for this rank at ``name``.
    """
    if not _armed.faults:
        return
    count = _armed.counts[name] = _armed.counts.get(name, 0) + 1
    for fault in _armed.faults:
        if fault.at == name and fault.count == count:
            _fire(fault)


def _fire(fault: Fault) -> None:
    _write_view(RankView(fault.rank, f"hit fault: {fault.describe()}", _elapsed(), fault.action))
    if fault.action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault.action == "freeze":
        os.kill(os.getpid(), signal.SIGSTOP)
    elif fault.action == "stall":
        time.sleep(fault.stall_s)
    else:
        raise InjectedFault(fault.describe())


def _elapsed() -> float:
    return round(time.monotonic() - _armed.start, 3)


def _arm(faults: Sequence[Fault], rank: int, report_path: str | None) -> None:
    _disarm()
    _armed.faults = [f for f in faults if f.rank == rank]
    _armed.counts, _armed.report_path, _armed.start = {}, report_path, time.monotonic()
    if any(f.at == COLLECTIVE for f in _armed.faults):
        hooks.add_observer(_count_collective)
        _armed.counting = True


def _count_collective(op: str, bound: dict[str, Any]) -> None:
    point(COLLECTIVE)


def _disarm() -> None:
    if _armed.counting:
        hooks.remove_observer(_count_collective)
    _armed.counting, _armed.faults, _armed.counts, _armed.report_path = False, [], {}, None


def _write_view(view: RankView) -> None:
    if _armed.report_path is None:
        return
    tmp = f"{_armed.report_path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(view), f)
    os.replace(tmp, _armed.report_path)


def _on_rank(fn: Callable[..., Any], args: tuple, kwargs: dict, faults: Sequence[Fault], report_dir: str) -> Any:
    """Run ``fn`` on this rank with its faults armed; record what the rank saw."""
    rank = dist.get_rank()
    _arm(faults, rank, os.path.join(report_dir, f"rank{rank}.json"))
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:
        if not isinstance(exc, InjectedFault):
            message = " ".join(str(exc).split())[:300]
            _write_view(RankView(rank, f"raised {type(exc).__name__}: {message}", _elapsed(), "raised"))
        raise
    else:
        _write_view(RankView(rank, "finished", _elapsed(), "finished"))
        return value
    finally:
        _disarm()


def arm_from_env(rank: int, env: dict[str, str] | None = None) -> Fault | None:
    """Arm the fault described by ``$COURSE_FAULT`` (``action:rank:at:count``) in this process.

    For scripts launched by ``torchrun``: call it once at start-up with the global rank.
    Returns the fault if it concerns this rank, else ``None``.
    """
    spec = (os.environ if env is None else env).get(FAULT_ENV, "")
    if not spec:
        return None
    action, fault_rank, at, count = spec.split(":")
    fault = Fault(action, int(fault_rank), at, int(count))
    _arm([fault], rank, None)
    return fault if fault.rank == rank else None


# --------------------------------------------------------------------------- the kernel side

@dataclass(frozen=True)
class RankView:
    """What one rank saw: ``outcome`` is finished, raised, kill, freeze, stall, fail or ``no report``."""

    rank: int
    what: str
    seconds: float | None
    outcome: str


@dataclass
class FaultReport:
    """The outcome of :func:`run_with_faults`.

    ``results`` holds the per-rank return values when every rank finished, else ``None``;
    ``error`` is the :class:`helpers.runtime.cluster.ClusterError` the call raised (or ``None``);
    ``seconds`` is the wall time of the whole call, which includes starting a new group of
    rank processes when :func:`helpers.runtime.cluster.run` needs one: the ranks' ``views`` time the
    failure itself.
    """

    faults: list[Fault]
    views: list[RankView]
    results: list[Any] | None
    error: Exception | None
    seconds: float

    def __str__(self) -> str:
        lines = [f"faults: {', '.join(f.describe() for f in self.faults) or 'none'}"]
        for v in self.views:
            when = "" if v.seconds is None else f" after {v.seconds:.2f} s"
            lines.append(f"  rank {v.rank}: {v.what}{when}")
        verdict = "every rank finished" if self.error is None else f"run() raised {type(self.error).__name__}"
        lines.append(f"{verdict}; the call took {self.seconds:.2f} s (with the group's start, if run() started one)")
        return "\n".join(lines)


def run_with_faults(fn: Callable[..., Any], *args: Any, faults: Sequence[Fault], world_size: int = 2,
                    timeout: float = 30.0, seed: int | None = None, **kwargs: Any) -> FaultReport:
    """``run(fn, *args, **kwargs)`` with ``faults`` injected; never raises a cluster error.

    Returns a :class:`FaultReport`: every rank's view, the results if all finished, the
    error ``run`` raised otherwise. After a fault the group is gone; the next ``run``
    (a restart) gets fresh rank processes.
    """
    from helpers.runtime.cluster import ClusterError, run

    for fault in faults:
        if not 0 <= fault.rank < world_size:
            raise ValueError(f"{fault.describe()}: no such rank in a {world_size}-rank group")
    report_dir = remote.call(tempfile.mkdtemp, prefix="course-faults-")  # where the ranks run
    start = time.monotonic()
    results, error = None, None
    try:
        try:
            results = run(_on_rank, fn, args, kwargs, list(faults), report_dir, world_size=world_size,
                          timeout=timeout, seed=seed)
        except ClusterError as exc:
            error = exc
        seconds = time.monotonic() - start
        # read where the ranks wrote them (a grader's call runs in the kernel's sandbox)
        views = [_view(rank, report) for rank, report in enumerate(remote.call(_read_reports, report_dir, world_size))]
    finally:
        remote.call(shutil.rmtree, report_dir, ignore_errors=True)
    return FaultReport(list(faults), views, results, error, seconds)


def _read_reports(report_dir: str, world_size: int) -> list[dict | None]:
    """Each rank's report as plain data (None where it wrote none)."""
    reports: list[dict | None] = []
    for rank in range(world_size):
        try:
            with open(os.path.join(report_dir, f"rank{rank}.json"), encoding="utf-8") as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            reports.append(None)
    return reports


def _view(rank: int, report: Any) -> RankView:
    try:
        return RankView(**report)
    except TypeError:  # no report, or not one a rank writes
        return RankView(rank, "no report: still waiting when the group was torn down", None, "no report")
