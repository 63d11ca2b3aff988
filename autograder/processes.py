"""Every process a grading starts ends with it, even one a rank started in a new session.

A process started with ``start_new_session=True`` escapes the process-group signals that
end a kernel's children, and once its parent dies it is re-parented to init. The grader
marks itself a *child subreaper* (Linux ``PR_SET_CHILD_SUBREAPER``), so such orphans are
re-parented to the grader instead; :class:`Descendants` then finds every process below
the grader that was not there before grading and kills it. A grading run inside another
program (a test, a notebook) gives the flag back when it ends (:func:`become_subreaper` with
``False``), so that program is as it was.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def become_subreaper(on: bool = True) -> None:
    """Have orphaned descendants re-parented to this process instead of init, or (``on=False``) to init
    again (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def is_subreaper() -> bool:
    """Whether orphaned descendants are re-parented to this process (see :func:`become_subreaper`)."""
    if not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    ctypes.CDLL(None, use_errno=True).prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2:].split()[0] != b"Z"


def _parents() -> dict[int, int]:
    """``{pid: parent pid}`` of every process visible in /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name (field 2) may contain spaces and parentheses: split after the last ")"
        found[int(entry)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return found


def descendants(pid: int) -> set[int]:
    """The pids of every living process below ``pid``."""
    parents = _parents()
    below, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return below


class Descendants:
    """Processes below this one that appear between :meth:`__init__` and :meth:`end`."""

    def __init__(self) -> None:
        become_subreaper()
        self.before = descendants(os.getpid()) if os.path.isdir("/proc") else set()

    def end(self) -> list[int]:
        """Kill the new ones (SIGKILL) and reap those that are this process's children; return their pids."""
        if not os.path.isdir("/proc"):
            return []
        left = sorted(descendants(os.getpid()) - self.before)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in left:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:  # not our child: its own parent reaps it
                pass
        return left
