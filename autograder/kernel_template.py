"""The warm kernel template process:

    python kernel_template.py [--sandboxed SCRATCH] [--memory-limit BYTES] [--process-limit N]

It imports torch, ipykernel and the course's lesson modules once, starts one forkserver
for the kernels' ranks (:func:`helpers.runtime.cluster.share_forkserver`), prints ``ready``, and
then forks one kernel per request line on stdin (JSON: ``args``, ``env``, ``cwd``) and
answers the kernel's pid. No notebook code ever runs in it.

This file is run as a script, never imported from the ``autograder`` package: in a
sandbox (:mod:`autograder.sandbox`) it is mounted alone, read-only, and needs only the
standard library, ipykernel, torch and ``helpers``. ``--sandboxed`` means it runs there,
as the sandbox's init (pid 1), with ``SCRATCH`` its one writable directory:

* a kernel is its direct child (pids are the sandbox's own; the grader maps them to host
  pids), and it reaps every process of the sandbox that ends;
* no process in the sandbox can kill or stop it (an init gets only the signals it handles),
  and when it ends, Linux kills every process of the sandbox.

Otherwise (trusted chapters, self-study without bwrap) each kernel is forked twice, so it
is re-parented to the grader, which is a child subreaper (:mod:`autograder.processes`).

The template and its forkserver are not dumpable (``PR_SET_DUMPABLE`` 0), which forks
inherit: a kernel cannot ptrace them to change what later kernels or ranks run.
"""
from __future__ import annotations

import atexit
import ctypes
import gc
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time

PR_SET_DUMPABLE = 4
# What a kernel would otherwise import itself, measured with py-spy: ipykernel's debugger at
# start, psutil (jupyter_client's local addresses, ipykernel at shutdown) about 0.2 s each time.
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "numpy", "ipykernel.kernelapp", "ipykernel.debugger",
           "psutil", "helpers.runtime.cluster")
FORKSERVER_ENV = "COURSE_FORKSERVER"  # helpers.runtime.cluster.SHARED_FORKSERVER_ENV, before helpers is imported
PREVIOUS_KERNEL_S = 1.0  # seconds a new kernel waits for the one before it to end, so /tmp can be emptied
MODULE = "kernel_template"  # this file's name as a module, for the forkserver's preload


def _undumpable() -> None:
    """No process of this uid may ptrace this one or its forks (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


_undumpable()  # here, at import: the forkserver imports this module too (see _start_forkserver)


def _forget_forkserver() -> None:
    """In a kernel: forget the template's forkserver and resource tracker, which are not its children.

    The kernel reaches the forkserver by its address (:data:`FORKSERVER_ENV`), as any kernel
    of a grader does, and starts its own resource tracker when it needs one.
    """
    from multiprocessing import forkserver, resource_tracker

    server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
    for fd in (server._forkserver_alive_fd, tracker._fd):
        if fd is not None:
            os.close(fd)
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
    tracker._fd = tracker._pid = None


def _run_kernel(args: list[str], env: dict[str, str], cwd: str, parent: int | None) -> None:
    """In the forked kernel: become ``python -m ipykernel_launcher ARGS`` in ``cwd`` with ``env``.

    ``parent`` is the pid whose end ends the kernel (ipykernel's parent poller); None keeps
    the ``JPY_PARENT_PID`` of ``env``.
    """
    os.setsid()  # a session of its own, as jupyter_client starts kernels: interrupts reach its process group
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _forget_forkserver()
    os.chdir(cwd)
    sys.path[0] = cwd  # ``python -m`` puts the working directory first (here it was this file's directory)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the template's cached one; the kernel's TMPDIR instead
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.argv = [sys.argv[0], *args]
    parent = parent or int(env.get("JPY_PARENT_PID") or 0)
    if parent:  # ipykernel read JPY_PARENT_PID when the template imported it: name the parent again
        sys.argv.append(f"--IPKernelApp.parent_handle={parent}")  # the kernel ends with it
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def _become_kernel(request: dict) -> None:
    """In a fork of the template: run the kernel, then exit (never return into the template's loop)."""
    try:
        parent = os.getppid() if SANDBOXED else None
        _run_kernel(request["args"], request["env"], request["cwd"], parent)
    finally:
        atexit._run_exitfuncs()  # the kernel's own clean-up (scratch directories, groups)
        os._exit(0)


def _fork_once(request: dict) -> int:
    """Fork the kernel as this process's child (in the sandbox); its pid."""
    pid = os.fork()
    if pid == 0:
        _become_kernel(request)
    return pid


def _fork_twice(request: dict) -> int:
    """Fork the kernel through a short-lived middle process, so it is re-parented to the grader; its pid."""
    read_fd, write_fd = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_fd)
        kernel = os.fork()
        if kernel == 0:
            os.close(write_fd)
            _become_kernel(request)
        os.write(write_fd, f"{kernel}\n".encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as answer:
        pid = int(answer.readline())
    os.waitpid(middle, 0)
    return pid


_kernels: set[int] = set()  # the kernels forked in the sandbox that have not ended


def _reap(signum: int, frame: object) -> None:
    """SIGCHLD in the sandbox's init: reap every child that ended (kernels, orphans)."""
    try:
        while pid := os.waitpid(-1, os.WNOHANG)[0]:
            _kernels.discard(pid)
    except ChildProcessError:
        pass


def _wait_for_kernels(seconds: float) -> None:
    """Reap ended kernels; while some are still running, look again for up to ``seconds``."""
    deadline = time.monotonic() + seconds
    _reap(0, None)
    while _kernels and time.monotonic() < deadline:
        time.sleep(0.02)
        _reap(0, None)


def remove_entry(entry: os.DirEntry) -> None:
    """Remove a file, link or directory tree, whatever is left of it (the grader uses it too)."""
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path, ignore_errors=True)
    else:
        try:
            os.unlink(entry.path)
        except OSError:
            pass


def _clear_tmp(scratch: str) -> None:
    """Empty the sandbox's /tmp but for the ``scratch`` directory in it: what one kernel left, the next cannot find."""
    for entry in os.scandir("/tmp"):
        if os.path.commonpath([entry.path, scratch]) == entry.path:
            continue  # the grader's (it removes what is left there)
        remove_entry(entry)


def _start_forkserver() -> str:
    """Start the forkserver the kernels' ranks are forked from (its preload runs in its own process,
    while this one goes on); its address.

    It imports this file first (as :data:`MODULE`, found through ``PYTHONPATH``), which makes
    it undumpable, as the ranks it forks then are.
    """
    from helpers.runtime import cluster

    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.abspath(__file__)), *filter(None, [saved])])
    try:
        return cluster.share_forkserver(first=(MODULE,))
    finally:  # a kernel that starts its own forkserver neither finds nor needs this file
        if saved is None:
            os.environ.pop("PYTHONPATH")
        else:
            os.environ["PYTHONPATH"] = saved


def _await_forkserver() -> None:
    """Return once the forkserver has run its preload: it serves a request only then, so one no-op
    process started through it means no kernel starts while the forkserver could still be traced."""
    import multiprocessing

    probe = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    probe.start()
    probe.join()


def _serve() -> None:
    """The template: import, start the forkserver, say ready, then fork one kernel per request line."""
    from helpers.runtime.cluster import LESSON_MODULES  # torch and the cluster: what starting the forkserver needs

    forkserver = _start_forkserver()  # its preload (torch again, the lessons) runs beside the imports here
    for name in (*PRELOAD, *LESSON_MODULES):
        __import__(name)
    _await_forkserver()
    gc.freeze()  # what the template holds is never garbage: a kernel's collections skip it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C for the grader is not for the template
    if SANDBOXED:  # the sandbox's init: every orphan of the sandbox comes here
        signal.signal(signal.SIGCHLD, _reap)
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        request["env"][FORKSERVER_ENV] = forkserver  # never the grader's: its ranks would run outside
        if SANDBOXED:
            _wait_for_kernels(PREVIOUS_KERNEL_S)  # one that jupyter just shut down may not be reaped yet
            if not _kernels:  # kernels of a grading run one after another; a test may start two at once
                _clear_tmp(SCRATCH)
            pid = _fork_once(request)
            _kernels.add(pid)
        else:
            pid = _fork_twice(request)
        print(pid, flush=True)


def _option(argv: list[str], name: str) -> str | None:
    """The value after ``name`` in ``argv`` (None if absent)."""
    return argv[argv.index(name) + 1] if name in argv else None


SANDBOXED = False
SCRATCH = "/"  # the sandbox's writable directory (--sandboxed SCRATCH)

if __name__ == "__main__":
    SCRATCH = _option(sys.argv, "--sandboxed") or SCRATCH
    SANDBOXED, memory_limit = "--sandboxed" in sys.argv, int(_option(sys.argv, "--memory-limit") or 0)
    process_limit = int(_option(sys.argv, "--process-limit") or 0)
    if memory_limit:  # every process of the sandbox inherits it, and none can raise it
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    if process_limit:  # per user namespace; a root grader's sandboxes are bounded by a pids cgroup instead
        resource.setrlimit(resource.RLIMIT_NPROC, (process_limit, process_limit))
    _serve()
