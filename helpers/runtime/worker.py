"""The rank side of :mod:`helpers.runtime.cluster`: one long-lived process per rank.

A worker joins a gloo group once, then runs tasks sent by the notebook kernel:
``fn`` shipped by value with cloudpickle, run with seeded RNGs, its stdout, stderr
and warnings captured (a nbgrader test cell that writes to stderr scores 0), every
collective reported to the kernel before it is entered (the ledger), and the result
or the traceback sent back.

This module is imported by the multiprocessing forkserver (``preload``), so a new
worker is a fork of a process that has already imported torch.
"""
from __future__ import annotations

import faulthandler
import os
import random
import signal
import sys
import tempfile
import threading
import traceback
import warnings
from datetime import timedelta
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch._dynamo  # noqa: F401  (the first optimizer imports it lazily: seconds per rank otherwise)
import torch.distributed as dist

from helpers.runtime.ledger import RENAMED_WARNING, install_recorder, record_of


class _Ledger:
    """Reports each collective to the kernel just before the rank enters it."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.task_id = -1
        self.calls = 0

    def record(self, op: str, bound: dict[str, Any]) -> None:
        self.conn.send(("coll", self.task_id, record_of(op, bound, self.calls)))
        self.calls += 1


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _watch_lifeline(lifeline: Any) -> None:
    """Exit as soon as the kernel that owns this worker goes away (EOF on the pipe)."""
    try:
        lifeline.recv()
    except (EOFError, OSError):
        pass
    os._exit(0)


class _Capture:
    """File-level capture of fds 1 and 2, so C++ logs from gloo are caught too."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)

    def take(self, limit: int = 64_000) -> str:
        sys.stdout.flush()
        sys.stderr.flush()
        size = os.fstat(self.fd).st_size
        start = max(0, size - limit)
        text = os.pread(self.fd, size - start, start).decode("utf-8", "replace")
        os.ftruncate(self.fd, 0)
        if start:
            text = f"... ({start} earlier bytes of output dropped)\n" + text
        return text


def _format_warnings(caught: list[warnings.WarningMessage]) -> str:
    return "".join(f"{w.category.__name__}: {w.message} ({os.path.basename(w.filename)}:{w.lineno})\n" for w in caught)


GROUP_DESTROYED = ("the function destroyed the process group that run() owns (do not call "
                   "destroy_process_group in it); a new group is formed for the next call")


def _error(exc: BaseException) -> tuple[str, str, str, list[tuple[str, int, str]]]:
    """(exception type, traceback text, exception line, frames as (file, line number, function))."""
    # Start the traceback at fn: the frames above it are this module's plumbing.
    tb = exc.__traceback__.tb_next if exc.__traceback__ else None
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    line = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb)]
    return type(exc).__name__, text, line, frames


def _run_task(payload: bytes, seed: int, capture: _Capture) -> tuple[str, Any, str]:
    """Run one task; returns (status, value or :func:`_error`'s tuple, captured output)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message=RENAMED_WARNING, category=FutureWarning)
        try:
            fn, args, kwargs = cloudpickle.loads(payload)
            _seed_everything(seed)
            value = fn(*args, **kwargs)
            if not dist.is_initialized():
                raise RuntimeError(GROUP_DESTROYED)
            status, result = "done", cloudpickle.dumps(value)
        except BaseException as exc:  # a student's rank may raise anything, even SystemExit
            status, result = "error", _error(exc)
    return status, result, _format_warnings(caught) + capture.take()


def main(rank: int, world_size: int, store_path: str, conn: Any, lifeline: Any, capture_path: str,
         environ: dict[str, str]) -> None:
    """Entry point of one rank process; never returns (exits with ``os._exit``).

    ``environ`` is the caller's environment: a forkserver shared by several kernels
    (``helpers.runtime.cluster.share_forkserver``) has its own, older one.
    """
    os.environ.clear()
    os.environ.update(environ)
    tempfile.tempdir = None  # the forkserver's cached temporary directory; the caller's TMPDIR instead
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    capture = _Capture(capture_path)
    faulthandler.register(signal.SIGUSR1, file=capture.fd, all_threads=False)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store_path}", rank=rank, world_size=world_size,
        timeout=timedelta(hours=1),  # the kernel enforces run()'s own, shorter timeout
    )
    dist.barrier()  # gloo connects lazily: pay for the first collective while the group forms
    ledger = _Ledger(conn)
    install_recorder(ledger.record)
    conn.send(("ready", rank, capture.take()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        if message[0] == "stop":
            # A barrier before destroy: tearing a gloo group down while a peer is
            # still connected can abort the process with SIGABRT.
            dist.barrier()
            dist.destroy_process_group()
            conn.send(("stopped", rank))
            os._exit(0)
        _, task_id, payload, seed = message
        ledger.task_id, ledger.calls = task_id, 0
        status, result, output = _run_task(payload, seed, capture)
        conn.send((status, task_id, result, output))
        if not dist.is_initialized():
            os._exit(0)  # the kernel discards this group and forms a new one for the next call
