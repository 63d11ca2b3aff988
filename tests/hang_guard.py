"""A deadline that turns a hang into a test failure; never a statement about speed.

Tests assert order and outcome, not how long something took: pytest shares the cores with
the course check (tests/suite.py), so a time bound is flaky under load and says nothing
about correctness. Where a wrong implementation would never return (an endless loop that
nothing bounds, a wait that is never woken), a test wraps the call in :func:`hang_guard`
with a deadline far above what the correct behaviour needs on a loaded machine.
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

HANG_S = 300  # the default deadline: a group's start alone may take up to 120 s on 2 busy cores


class Hang(BaseException):
    """The guarded block was still running at its deadline.

    A BaseException, like KeyboardInterrupt: code under test that catches ``Exception`` cannot
    swallow it, and helpers.runtime.cluster.run, which catches BaseException to kill its ranks, passes
    it on after doing so.
    """


@contextmanager
def hang_guard(what: str, seconds: float = HANG_S) -> Iterator[None]:
    """Raise :class:`Hang` in the block if it has not ended after ``seconds`` (SIGALRM, main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("hang_guard needs the main thread (it uses SIGALRM)")

    def expired(signum: int, frame: object) -> None:
        raise Hang(f"{what}: still running after {seconds:g} s (a hang guard, not a speed limit)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
