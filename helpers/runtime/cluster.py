"""A local gloo cluster you can drive from a notebook cell.

    >>> from helpers.runtime.cluster import run
    >>> run(lambda: dist.get_rank() * 10, world_size=3)
    [0, 10, 20]

``run`` ships ``fn`` by value (cloudpickle, so functions defined in a notebook cell
work), runs it on every rank of an initialised gloo group and returns the per-rank
results. Rank processes stay warm between calls (a forkserver that has imported
torch forks them once per world size), so a repeated call costs milliseconds instead
of the seconds a fresh ``torch.multiprocessing.spawn`` group costs.

Every call is bounded: a rank that raises comes back as :class:`RankError` with its
traceback, ranks whose collectives diverge as :class:`CollectiveMismatch`, ranks that
are stuck as :class:`CollectiveTimeout`. After any of these the workers are killed and
the next call starts a fresh group.

"Stuck" is decided from evidence, not from wall time alone, so a busy machine does not
turn a slow correct call into a deadlock verdict:

* at once (after ``ERROR_GRACE``), when a rank waits in a collective that a peer which
  already returned never entered;
* after ``timeout`` seconds, when for ``PROGRESS_WINDOW`` seconds no unfinished rank used
  CPU time (``MIN_CPU_S``) or entered a collective: ranks blocked in gloo or sleeping use
  none, ranks computing on a loaded machine still do;
* after ``runaway_timeout`` seconds (default ``RUNAWAY_FACTOR * timeout``) whatever the
  ranks are doing: the hard bound for an endless loop.
"""
from __future__ import annotations

import atexit
import collections
import io
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import cloudpickle

import torch

from helpers import COURSE_SEED
from helpers.lessons import LESSONS
from helpers.runtime.ledger import CollectiveRecord, Ledger
from helpers.runtime import remote

# The rank processes need the cores: a notebook kernel computing references on every
# core at the same time slows both down many times over on a 2-core laptop.
torch.set_num_threads(1)

__all__ = [
    "run", "shutdown", "rank_seed", "CollectiveTimeout", "RankError", "CollectiveMismatch",
    "ClusterError", "Ledger", "CollectiveRecord",
]

MAX_WORLD_SIZE = 8
STARTUP_TIMEOUT = 120.0  # seconds for a new group to form (2 cores, busy CI)
ERROR_GRACE = 1.0  # seconds the other ranks get to finish after one rank raised
STOP_TIMEOUT = 5.0  # seconds a graceful shutdown may take before workers are killed
PROGRESS_WINDOW = 2.0  # seconds without progress, once ``timeout`` has passed, that mean "stuck"
MIN_CPU_S = 0.05  # CPU seconds a rank must use within the window to count as computing
RUNAWAY_FACTOR = 6.0  # default hard bound, as a multiple of ``timeout``
# Longest single wait for rank messages: a SIGINT delivered to another thread of the caller
# (a timer, the kernel's) only raises KeyboardInterrupt once the main thread wakes up.
WAKE_S = 0.25
SHARED_FORKSERVER_ENV = "COURSE_FORKSERVER"  # address of a forkserver a grader shares with its kernels
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ClusterError(RuntimeError):
    """Base class of the errors :func:`run` raises for a failed distributed call."""


class RankError(ClusterError):
    """A rank raised an exception (or its process died); carries that rank's traceback.

    ``exc_line`` is the exception's own line (``ValueError: shard 2 is empty``) and
    ``frame`` the caller's deepest frame in it (file, line and code), "" if unknown.
    """

    def __init__(self, message: str, rank: int, exc_type: str, traceback_text: str,
                 exc_line: str = "", frame: str = "") -> None:
        super().__init__(message)
        self.rank = rank
        self.exc_type = exc_type
        self.traceback_text = traceback_text
        self.exc_line = exc_line
        self.frame = frame


class CollectiveTimeout(ClusterError, TimeoutError):
    """Some ranks did not finish within the timeout, typically stuck in a collective."""

    def __init__(self, message: str, unfinished: list[int]) -> None:
        super().__init__(message)
        self.unfinished = unfinished


class CollectiveMismatch(ClusterError):
    """The ranks of a group issued different collectives (op, dtype or shape) at one call."""


def _code_keeping_filename(code: types.CodeType) -> tuple:
    """cloudpickle's reduction of a code object, with the file name it drops put back.

    Tracebacks from a rank then name the notebook cell or file the caller's code came
    from, so its lines can be shown (see :func:`_own_frame`).
    """
    rebuild, args = cloudpickle.cloudpickle._code_reduce(code)
    return rebuild, tuple(code.co_filename if arg == "<dynamic-code>" else arg for arg in args)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = collections.ChainMap({types.CodeType: _code_keeping_filename},
                                          cloudpickle.Pickler.dispatch_table)


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()


def rank_seed(seed: int, rank: int) -> int:
    """The seed rank ``rank`` uses for torch, numpy and random, derived from ``seed``."""
    return seed * 1000 + rank


# What the forkserver imports once, so that every rank it forks has it: the rank's main loop,
# the lesson modules whose functions ranks run (their matplotlib imports, for figures, cost
# about 1 CPU second in every rank otherwise), and the torch.distributed parts the
# references use. ipywidgets is left out: it must be first imported by the kernel itself.
LESSON_MODULES = (*(item.package for item in LESSONS), "helpers.runtime.faults")
RANK_PRELOAD = ("helpers.runtime.worker", *LESSON_MODULES,
                "torch.distributed.optim", "torch.distributed.fsdp", "torch.distributed.checkpoint",
                "torch.distributed.algorithms.ddp_comm_hooks", "torch.utils.serialization")


def _context() -> mp.context.ForkServerContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(RANK_PRELOAD))
    return ctx


def _start_forkserver_quietly() -> None:
    """Start the forkserver with fds 1 and 2 on /dev/null, or use the shared one.

    In a Jupyter kernel fds 1/2 are forwarded to the notebook, and anything the
    forkserver (or the resource tracker it starts) writes there would land in a
    cell's stderr, which makes nbgrader score a passing test cell 0.
    """
    from multiprocessing import forkserver

    if _attach_shared_forkserver():
        return
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        forkserver.ensure_running()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def share_forkserver(first: Sequence[str] = ()) -> str:
    """Start this process's forkserver (torch imported) for the kernels it will start; its address.

    The one hook a grader uses. A grader that starts many kernels one after another sets
    :data:`SHARED_FORKSERVER_ENV` to this address in their environment: their ranks are then
    forked from this one server instead of each kernel starting its own (about 2.5 CPU seconds:
    Python, torch and torch._dynamo imported again). The server imports the modules ``first``
    (the grader's own, e.g. one that makes it undumpable), then :data:`RANK_PRELOAD`. A rank is
    a fork, so nothing it does reaches the server's memory; if the server is gone, a kernel
    starts its own again.
    """
    from multiprocessing import forkserver

    _context().set_forkserver_preload([*first, *RANK_PRELOAD])
    _start_forkserver_quietly()
    return forkserver._forkserver._forkserver_address


def _attach_shared_forkserver() -> bool:
    """Use the forkserver named by :data:`SHARED_FORKSERVER_ENV`, if there is one and this process has none."""
    from multiprocessing import forkserver, resource_tracker

    global _shared_alive_fd
    server = forkserver._forkserver
    address = os.environ.get(SHARED_FORKSERVER_ENV, "")
    if _shared_alive_fd is not None:
        return True
    if server._forkserver_pid is not None or not address or not os.path.exists(address):
        return False
    # multiprocessing sends the client's "alive" fd along with each request; the shared
    # server watches its own starter's, so any open fd will do here.
    _shared_alive_fd = os.open(os.devnull, os.O_WRONLY)
    server._forkserver_address, server._forkserver_alive_fd = address, _shared_alive_fd
    server.ensure_running = resource_tracker.ensure_running  # no pid to poll: it is not our child
    return True


def _detach_shared_forkserver() -> None:
    """Forget the shared forkserver (it died): the next pool starts this process's own."""
    from multiprocessing import forkserver

    global _shared_alive_fd
    server = forkserver._forkserver
    if _shared_alive_fd is None:
        return
    os.close(_shared_alive_fd)
    _shared_alive_fd = None
    server._forkserver_address = server._forkserver_alive_fd = None
    del server.ensure_running
    os.environ.pop(SHARED_FORKSERVER_ENV, None)


_shared_alive_fd: int | None = None


@contextmanager
def _main_module_hidden() -> Iterator[None]:
    """Keep multiprocessing from re-importing ``__main__`` in the rank processes.

    Functions travel by value (cloudpickle), so ranks never need the caller's main
    module, and re-running a script that lacks an ``if __name__ == "__main__"``
    guard in every rank would start the whole script again there.
    """
    main = sys.modules["__main__"]
    saved = {key: main.__dict__[key] for key in ("__file__", "__spec__") if key in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class _Pool:
    """``world_size`` warm rank processes that form one gloo group."""

    def __init__(self, world_size: int) -> None:
        _context()
        _start_forkserver_quietly()
        self.world_size = world_size
        self.tmpdir = tempfile.mkdtemp(prefix="course-cluster-")
        self.capture_paths = [os.path.join(self.tmpdir, f"rank{k}.out") for k in range(world_size)]
        self.conns: list[mp.connection.Connection] = []
        self.lifelines: list[mp.connection.Connection] = []
        self.procs: list[mp.process.BaseProcess] = []
        try:
            self._start_ranks()
        except OSError:  # the shared forkserver is gone: start our own and try once more
            if _shared_alive_fd is None:
                raise
            self.kill(keep_tmpdir=True)
            self.procs = []
            _detach_shared_forkserver()
            _start_forkserver_quietly()
            self._start_ranks()
        self._await_ready()

    def _start_ranks(self) -> None:
        from helpers.runtime import worker as _worker

        ctx = _context()
        store_path = os.path.join(self.tmpdir, "store")  # a FileStore: no TCP port to collide
        if os.path.exists(store_path):  # left by a failed first attempt
            os.unlink(store_path)
        for rank in range(self.world_size):
            ours, theirs = ctx.Pipe(duplex=True)
            life_r, life_w = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_worker.main,
                args=(rank, self.world_size, store_path, theirs, life_r, self.capture_paths[rank], dict(os.environ)),
                name=f"course-rank-{rank}",
                daemon=True,
            )
            try:
                with _main_module_hidden():
                    proc.start()
            finally:
                theirs.close()
                life_r.close()
            self.conns.append(ours)
            self.lifelines.append(life_w)
            self.procs.append(proc)

    def _await_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        waiting = set(range(self.world_size))
        while waiting:
            remaining = deadline - time.monotonic()
            ready = mp.connection.wait([self.conns[k] for k in waiting] + [self.procs[k].sentinel for k in waiting],
                                       timeout=max(0.0, remaining))
            if not ready:
                self.kill()
                raise ClusterError(f"a {self.world_size}-rank gloo group did not form within {STARTUP_TIMEOUT:.0f} s")
            for k in list(waiting):
                if self.conns[k] in ready or self.procs[k].sentinel in ready:
                    try:
                        self.conns[k].recv()
                        waiting.discard(k)
                    except (EOFError, OSError):
                        self.procs[k].join(timeout=5)
                        tail = _tail(self.capture_paths[k])
                        self.kill()
                        raise ClusterError(f"rank {k} died ({_exit_reason(self.procs[k].exitcode)}) while the "
                                           f"group was forming; its output:\n{tail}") from None

    def alive(self) -> bool:
        return all(p.is_alive() for p in self.procs)

    def dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask stuck ranks where they are (faulthandler on SIGUSR1) and read their output."""
        for k in ranks:
            if self.procs[k].is_alive():
                os.kill(self.procs[k].pid, signal.SIGUSR1)
        time.sleep(0.2)
        return {k: _user_frames(_tail(self.capture_paths[k])) for k in ranks}

    def kill(self, keep_tmpdir: bool = False) -> None:
        """Kill every rank process now (they may be stuck inside a collective)."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
        for proc in self.procs:
            proc.join(timeout=5)
        self._close(keep_tmpdir)

    def stop(self) -> None:
        """Graceful stop: barrier, destroy the group, exit; kill whatever lingers."""
        try:
            for conn in self.conns:
                conn.send(("stop",))
            deadline = time.monotonic() + STOP_TIMEOUT
            for proc in self.procs:
                proc.join(timeout=max(0.0, deadline - time.monotonic()))
        except (OSError, EOFError):
            pass
        self.kill()

    def _close(self, keep_tmpdir: bool = False) -> None:
        for conn in (*self.conns, *self.lifelines):
            conn.close()
        self.conns, self.lifelines = [], []
        if not keep_tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def _tail(path: str, limit: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_PLUMBING = ("multiprocessing", "helpers/runtime/worker.py", "c10d_logger.py", "<string>")
_HERE = os.path.dirname(os.path.abspath(__file__))
# Where frames are not the caller's own: the standard library, torch, and the course's packages.
_LIBRARY_DIRS = (os.path.dirname(os.__file__), os.path.dirname(torch.__file__), _HERE + os.sep,
                 os.path.join(os.path.dirname(_HERE), "autograder") + os.sep)


def _user_frames(dump: str) -> str:
    """Keep the frames of a faulthandler dump that belong to the caller's code."""
    return "\n".join(line for line in dump.splitlines() if not any(p in line for p in _PLUMBING))


def _own_frame(frames: list[tuple[str, int, str]]) -> str:
    """The deepest frame of the caller's code (not torch, the standard library or the course), with its line.

    Ranks cannot show a notebook cell's code (it lives in the kernel's line cache), so
    the line is looked up here.
    """
    import linecache

    for filename, lineno, name in reversed(frames):
        if not filename.startswith(_LIBRARY_DIRS) and "site-packages" not in filename:
            code = linecache.getline(filename, lineno).strip()
            return f'File "{filename}", line {lineno}, in {name}' + (f"\n    {code}" if code else "")
    return ""


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system, seconds) process ``pid`` has used; 0 if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


_pools: dict[int, _Pool] = {}
_lock = threading.Lock()
_task_counter = 0


def _pool(world_size: int) -> _Pool:
    pool = _pools.get(world_size)
    if pool is None or not pool.alive():
        _stop_before_kernel_exits()
        if pool is not None:
            pool.kill()
        pool = _pools[world_size] = _Pool(world_size)
    return pool


def _discard(world_size: int) -> None:
    pool = _pools.pop(world_size, None)
    if pool is not None:
        pool.kill()


def shutdown() -> None:
    """Stop every warm group (called automatically when the Python process exits)."""
    with _lock:
        for world_size in list(_pools):
            _pools.pop(world_size).stop()


atexit.register(shutdown)


def _stop_helper_processes() -> None:
    """Stop the groups, then the forkserver, then multiprocessing's resource tracker."""
    from multiprocessing import forkserver, resource_tracker

    shutdown()
    server = forkserver._forkserver
    if server._forkserver_pid is not None:
        # Its ranks are gone and it holds no state; exiting on its own would first spend
        # about 0.7 s finalising the torch it imported.
        os.kill(server._forkserver_pid, signal.SIGKILL)
    server._stop()  # reaps it and removes its socket
    resource_tracker._resource_tracker._stop()


_kernel_hooked = False


def _stop_before_kernel_exits() -> None:
    """In a Jupyter kernel, end this module's processes before the kernel signals its children.

    Asked to shut down, ipykernel 7 SIGTERMs every child process in its process group
    *before* Python's atexit handlers run: the ranks would die without the barrier that
    protects gloo's teardown, and multiprocessing's resource tracker ignores SIGTERM, so the
    kernel waits for it until jupyter_client kills the kernel (2.5 s lost on every shutdown
    and restart, and the groups' temporary directories left behind). The hook wraps the
    kernel's shutdown step (``_at_shutdown``, ipykernel is pinned) to stop them first.
    """
    global _kernel_hooked
    if _kernel_hooked or "ipykernel" not in sys.modules:
        return
    from ipykernel.kernelapp import IPKernelApp
    from traitlets.config import MultipleInstanceError

    try:
        app = IPKernelApp.instance() if IPKernelApp.initialized() else None
    except MultipleInstanceError:  # another app is this process's singleton (nbgrader's, grading in process)
        return
    if app is None or app.kernel is None:
        return
    kernel = app.kernel
    at_shutdown = kernel._at_shutdown

    async def stop_then_shut_down() -> None:
        try:
            _stop_helper_processes()
        finally:
            await at_shutdown()

    kernel._at_shutdown = stop_then_shut_down
    _kernel_hooked = True


class _Outcome:
    """What came back from the ranks for one task."""

    def __init__(self, world_size: int) -> None:
        self.results: dict[int, Any] = {}
        self.errors: dict[int, tuple[str, str]] = {}
        self.died: dict[int, int | None] = {}
        self.outputs: dict[int, str] = {}
        self.records: list[list[CollectiveRecord]] = [[] for _ in range(world_size)]
        # Per group, the signature of call #i as first seen, to spot a mismatch while
        # ranks are still waiting in it (gloo would hang, mix values or abort).
        self._seen: dict[tuple[int, ...], list[tuple]] = {}
        self._calls: dict[tuple[int, tuple[int, ...]], int] = {}
        self.mismatched = False
        self.messages = 0  # messages received: entering a collective is progress
        self.verdict = ""  # why unfinished ranks were given up on: "deadlock", "stalled" or "runaway"

    def add_record(self, rank: int, record: CollectiveRecord) -> None:
        self.records[rank].append(record)
        key = (rank, record.group_ranks)
        index = self._calls.get(key, 0)
        self._calls[key] = index + 1
        seen = self._seen.setdefault(record.group_ranks, [])
        if index == len(seen):
            seen.append(record.signature)
        elif seen[index] != record.signature:
            self.mismatched = True

    def finished(self, rank: int) -> bool:
        return rank in self.results or rank in self.errors or rank in self.died

    def waits_for_returned_peer(self, rank: int) -> bool:
        """Whether ``rank`` is in a collective that a peer which already returned never entered."""
        if not self.records[rank]:
            return False
        last = self.records[rank][-1]
        index = self._calls[(rank, last.group_ranks)] - 1
        return any(peer in self.results and self._calls.get((peer, last.group_ranks), 0) <= index
                   for peer in last.group_ranks if peer != rank)


def run(
    fn: Callable[..., Any],
    *args: Any,
    world_size: int = 2,
    timeout: float = 30.0,
    seed: int | None = None,
    ledger: bool = False,
    runaway_timeout: float | None = None,
    **kwargs: Any,
) -> list[Any] | tuple[list[Any], Ledger]:
    """Run ``fn(*args, **kwargs)`` on every rank of a gloo group; return per-rank results.

    Args:
        fn: called on each rank with ``torch.distributed`` already initialised
            (backend gloo, ``world_size`` ranks). May be defined in a notebook cell.
        world_size: number of ranks, 1 to 8.
        timeout: seconds after which ranks that make no progress (no CPU time, no
            collective entered, for ``PROGRESS_WINDOW`` seconds) raise
            :class:`CollectiveTimeout`; ranks still computing may go on.
        runaway_timeout: hard bound in seconds on the whole call, whatever the ranks
            do (default ``RUNAWAY_FACTOR * timeout``).
        seed: course seed; rank ``k`` seeds torch, numpy and random with
            ``rank_seed(seed, k)`` before calling ``fn`` (default ``COURSE_SEED``).
        ledger: also return the :class:`Ledger` of collectives each rank issued.

    Returns:
        ``results`` (index = rank), or ``(results, ledger)`` when ``ledger=True``.
    """
    global _task_counter
    if not 1 <= world_size <= MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {MAX_WORLD_SIZE}, got {world_size}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    runaway = RUNAWAY_FACTOR * timeout if runaway_timeout is None else max(runaway_timeout, timeout)
    if remote.session is not None and remote.ships_student_code((fn, args, kwargs)):
        # In a grader's process: the notebook's code runs on the notebook kernel's ranks, never here.
        return remote.session.call("run", fn, args, dict(kwargs, world_size=world_size, timeout=timeout, seed=seed,
                                                        ledger=ledger, runaway_timeout=runaway_timeout))
    try:
        payload = _dumps((fn, args, kwargs))
    except Exception as exc:
        raise TypeError(f"cannot send {fn!r} and its arguments to the ranks: {exc}") from exc
    seed = COURSE_SEED if seed is None else seed
    with _lock:
        pool = _pool(world_size)
        _task_counter += 1
        task_id = _task_counter
        try:
            for rank, conn in enumerate(pool.conns):
                conn.send(("task", task_id, payload, rank_seed(seed, rank)))
            outcome = _collect(pool, task_id, timeout, runaway)
        except BaseException:  # KeyboardInterrupt included: never leave ranks mid-collective
            _discard(world_size)
            raise
        _print_outputs(outcome.outputs)
        result_ledger = Ledger(outcome.records)
        error = _diagnose(pool, outcome, result_ledger, timeout, runaway)
        if error is not None:
            _discard(world_size)
            raise error
    results = [cloudpickle.loads(outcome.results[k]) for k in range(world_size)]
    return (results, result_ledger) if ledger else results


class _Progress:
    """CPU time and messages of the unfinished ranks at one instant, to compare with later."""

    def __init__(self, pool: _Pool, outcome: _Outcome, pending: list[int]) -> None:
        self.at = time.monotonic()
        self.messages = outcome.messages
        self.cpu = {k: _cpu_seconds(pool.procs[k].pid) for k in pending}

    def advanced(self, pool: _Pool, outcome: _Outcome) -> bool:
        return outcome.messages > self.messages or any(
            _cpu_seconds(pool.procs[k].pid) - cpu >= MIN_CPU_S for k, cpu in self.cpu.items())


def _collect(pool: _Pool, task_id: int, timeout: float, runaway: float) -> _Outcome:
    """Read messages from all ranks until each finished, or the unfinished ones are stuck (see the module doc)."""
    outcome = _Outcome(pool.world_size)
    start = time.monotonic()
    hard_end, grace_end = start + runaway, float("inf")
    progress: _Progress | None = None
    while True:
        pending = [k for k in range(pool.world_size) if not outcome.finished(k)]
        if not pending:
            return outcome
        now = time.monotonic()
        if outcome.errors or outcome.died or outcome.mismatched:
            grace_end = min(grace_end, now + ERROR_GRACE)
        elif any(outcome.waits_for_returned_peer(k) for k in pending):
            outcome.verdict = "deadlock"
            grace_end = min(grace_end, now + ERROR_GRACE)
        if now >= hard_end:
            outcome.verdict = outcome.verdict or "runaway"
            return outcome
        if now >= grace_end:
            return outcome
        next_look = min(hard_end, grace_end)
        if now >= start + timeout:
            if progress is not None and now >= progress.at + PROGRESS_WINDOW:
                if not progress.advanced(pool, outcome):
                    outcome.verdict = outcome.verdict or "stalled"
                    return outcome
                progress = None
            if progress is None:
                progress = _Progress(pool, outcome, pending)
            next_look = min(next_look, progress.at + PROGRESS_WINDOW)
        else:
            next_look = min(next_look, start + timeout)
        watched = {pool.conns[k]: k for k in pending}
        sentinels = {pool.procs[k].sentinel: k for k in pending}
        for ready in mp.connection.wait([*watched, *sentinels], timeout=min(WAKE_S, max(0.0, next_look - now))):
            if ready in watched:
                _receive(pool, watched[ready], task_id, outcome)
            elif not pool.conns[sentinels[ready]].poll():
                outcome.died[sentinels[ready]] = pool.procs[sentinels[ready]].exitcode


def _receive(pool: _Pool, rank: int, task_id: int, outcome: _Outcome) -> None:
    try:
        message = pool.conns[rank].recv()
    except (EOFError, OSError):
        pool.procs[rank].join(timeout=1)
        outcome.died[rank] = pool.procs[rank].exitcode
        return
    kind, msg_task = message[0], message[1]
    if msg_task != task_id:
        return
    outcome.messages += 1
    if kind == "coll":
        outcome.add_record(rank, message[2])
    elif kind == "done":
        outcome.results[rank], outcome.outputs[rank] = message[2], message[3]
    elif kind == "error":
        outcome.errors[rank], outcome.outputs[rank] = message[2], message[3]


def _print_outputs(outputs: dict[int, str]) -> None:
    """Show what ranks printed (stdout, stderr, warnings) on the caller's stdout."""
    for rank in sorted(outputs):
        for line in outputs[rank].splitlines():
            print(f"[rank {rank}] {line}")


def _rank_status(outcome: _Outcome, rank: int) -> str:
    records = outcome.records[rank]
    count = len(records)
    if rank in outcome.results:
        return f"finished after {count} collective(s)"
    if rank in outcome.errors:
        return f"raised {outcome.errors[rank][0]} after {count} collective(s)"
    if rank in outcome.died:
        return f"process died ({_exit_reason(outcome.died[rank])}) after {count} collective(s)"
    if records:
        return f"still running; last collective entered: {records[-1].describe()} (call #{count})"
    return "still running; it entered no collective (a long computation or an endless loop?)"


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"


def _diagnose(pool: _Pool, outcome: _Outcome, ledger: Ledger, timeout: float, runaway: float) -> ClusterError | None:
    """Turn an unsuccessful outcome into one readable error (``None`` if all went well).

    The root cause comes first: ranks calling different collectives explain the hangs,
    aborts and "connection reset" errors that follow from them, and a rank whose process
    died explains its peers' connection errors.
    """
    n = pool.world_size
    for k in range(n):  # a rank that died while its peers' errors came in
        if not outcome.finished(k) and not pool.procs[k].is_alive():
            outcome.died[k] = pool.procs[k].exitcode
    status = "\n".join(f"  rank {k}: {_rank_status(outcome, k)}" for k in range(n))
    divergence = ledger.first_divergence()
    unfinished = [k for k in range(n) if not outcome.finished(k)]
    stacks = pool.dump_stacks(unfinished) if unfinished else {}
    where = "".join(f"\nwhere rank {k} is stuck:\n{stacks[k].strip()}\n" for k in unfinished if stacks[k].strip())
    restarted = "The worker group was restarted; the next run() starts fresh."

    if outcome.mismatched:
        return CollectiveMismatch(
            f"the ranks' collectives diverged at {divergence}. gloo does not check that ranks agree: "
            f"it hangs, aborts or silently mixes values, so nothing was returned.\n"
            f"per-rank status:\n{status}\n{where}\n{restarted}")

    if outcome.died:
        rank = min(outcome.died)
        tail = _tail(pool.capture_paths[rank])
        others = sorted(set(outcome.died) - {rank})
        also = f" (ranks {others} died too)" if others else ""
        message = (f"rank {rank}'s process died ({_exit_reason(outcome.died[rank])}){also}; errors of its "
                   f"peers follow from it.\nper-rank status:\n{status}")
        if tail.strip():
            message += f"\nlast output of rank {rank}:\n{tail}"
        return RankError(f"{message}\n{restarted}", rank, "ProcessDied", tail,
                         f"process died ({_exit_reason(outcome.died[rank])})")

    if outcome.errors:
        rank = min(outcome.errors)
        exc_type, tb, line, frames = outcome.errors[rank]
        others = sorted(set(outcome.errors) - {rank})
        also = f" (ranks {others} raised too)" if others else ""
        frame = _own_frame(frames)
        message = f"rank {rank} raised {line}{also}"
        if frame:
            message += f"\nin your code: {frame}"
        message += f"\n\n{tb}\nper-rank status:\n{status}"
        if unfinished:
            message += f"\n{restarted}"
        return RankError(message, rank, exc_type, tb, line, frame)

    if unfinished:
        message = _stuck_message(outcome, unfinished, timeout, runaway, n) + f"per-rank status:\n{status}\n"
        if divergence:
            message += (f"collectives diverged at {divergence}.\n"
                        "A rank that skips a collective leaves its peers waiting in it.\n")
        return CollectiveTimeout(f"{message}{where}\n{restarted}", unfinished)

    if divergence:
        return CollectiveMismatch(
            f"the ranks' collectives diverged at {divergence}. gloo does not check that ranks "
            f"agree, so the values returned would be silently wrong; they were discarded.\n{restarted}")
    return None


def _stuck_message(outcome: _Outcome, unfinished: list[int], timeout: float, runaway: float, n: int) -> str:
    """The first line of a :class:`CollectiveTimeout`: which ranks, and the evidence they are stuck."""
    if outcome.verdict == "deadlock":
        return (f"rank(s) {unfinished} wait in a collective that a rank which already returned never entered "
                f"(world_size={n}): a deadlock.\n")
    if outcome.verdict == "stalled":
        return (f"rank(s) {unfinished} did not finish within {timeout:g} s and then made no progress for "
                f"{PROGRESS_WINDOW:g} s (no CPU time used, no collective entered): they are blocked "
                f"(world_size={n}).\n")
    return (f"rank(s) {unfinished} did not finish within the hard bound of {runaway:g} s though still "
            f"computing (world_size={n}); an endless loop?\n")
