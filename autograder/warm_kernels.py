"""Grading kernels forked from a warm template: a fresh kernel without Python's, torch's and ipykernel's start-up.

Every grading needs a fresh kernel, and a fresh ``python -m ipykernel_launcher`` spends
about 1.5 CPU seconds importing ipykernel, torch and torch._dynamo before the notebook's
first cell runs. A grading process (``nbgrader autograde``, ``grade-class``, the course
check) instead starts one *template* process that has imported them and the course's lesson
modules (``helpers.cluster.LESSON_MODULES``, with the matplotlib they import), and
each kernel is a fork of it: its own process with the launcher's arguments, environment and
working directory, whose first cell finds those modules already imported. No notebook code
ever runs in the template, so one grading cannot leave anything behind for the next.

The kernel is forked twice (template -> short-lived middle -> kernel), so it is re-parented
to the grading process, which :mod:`autograder.processes` makes a child subreaper: jupyter
can then poll, signal and reap it like a kernel it started itself. Without a subreaper
(not Linux), or if the template is gone, kernels start the usual way.

The manager's kernel client waits for messages in slices of ``POLL_SLICE_S`` (see
:class:`WakefulChannel`), so a reply is never noticed later than one slice after it arrived.
"""
from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path
from queue import Empty
from typing import Any

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Type

from .processes import alive, is_subreaper

# What a kernel would otherwise import itself, measured with py-spy: ipykernel's debugger at
# start, psutil (jupyter_client's local addresses, ipykernel at shutdown) about 0.2 s each time.
PRELOAD = ("torch", "torch.distributed", "torch._dynamo", "numpy", "ipykernel.kernelapp", "ipykernel.debugger",
           "psutil", "helpers.cluster")
LAUNCHER = ["-m", "ipykernel_launcher"]
FORK_TIMEOUT_S = 30  # a template that does not answer by then is replaced by the usual launch
POLL_SLICE_S = 0.25  # the longest a message that has arrived can wait unnoticed


class ForkedKernel:
    """The part of :class:`subprocess.Popen` jupyter's provisioner uses, for a kernel this process did not spawn."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # already reaped (autograder.processes) or never ours
                pid, status = self.pid, None
                if alive(self.pid):
                    return None
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status) if status is not None else -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, signum)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """The template process and the pipe that asks it for kernels (one request at a time)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # kernels started at once (the book's chapters) ask from several threads
        self.process = subprocess.Popen([sys.executable, "-m", "autograder.warm_kernels"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the kernel template did not start")

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork_kernel(self, args: list[str], env: dict[str, str], cwd: str) -> ForkedKernel:
        with self.lock:
            self.process.stdin.write(json.dumps({"args": args, "env": env, "cwd": cwd}) + "\n")
            self.process.stdin.flush()
            reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the kernel template died")
        return ForkedKernel(int(reply))


_template: Template | None = None


def template() -> Template | None:
    """This process's kernel template, started on first use; None where kernels must start the usual way."""
    global _template
    if not sys.platform.startswith("linux") or not is_subreaper():
        return None
    if _template is None or not _template.alive():
        try:
            _template = Template()
        except (OSError, RuntimeError):
            _template = None
    return _template


async def _launch_forked(provisioner: LocalProvisioner, warm: Template, cmd: list[str], **kwargs: Any):
    """``LocalProvisioner.launch_kernel`` with the kernel forked from the template (the usual way if it fails)."""
    env = dict(kwargs.get("env") or os.environ)
    env["JPY_PARENT_PID"] = str(os.getpid())  # as jupyter_client's launcher sets it: the kernel ends with us
    cwd = str(kwargs.get("cwd") or Path.cwd())
    try:
        process = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
            None, warm.fork_kernel, cmd[len(LAUNCHER) + 1:], env, cwd), FORK_TIMEOUT_S)
    except (OSError, RuntimeError, ValueError, asyncio.TimeoutError):
        warm.process.kill()  # a template that failed once is not asked again
        return await LocalProvisioner.launch_kernel(provisioner, cmd, **kwargs)
    provisioner.process, provisioner.pid, provisioner.pgid, provisioner.cwd = process, process.pid, process.pid, cwd
    return provisioner.connection_info


class WakefulChannel(AsyncZMQSocketChannel):
    """jupyter's asyncio channel, but a wait for a message looks again every ``POLL_SLICE_S`` seconds.

    Measured here with two kernels busy at once on two cores: pyzmq's asyncio ``poll`` now
    and then was not woken when the kernel's reply arrived and returned it only at its
    timeout, which for a cell is the cell's whole time limit (a correct cell would then be
    reported as too slow). Every slice ends with a non-blocking poll, which sees the message.
    """

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        assert self.socket is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = POLL_SLICE_S if deadline is None else max(0.0, min(POLL_SLICE_S, deadline - time.monotonic()))
            if await self.socket.poll(int(wait * 1000)):
                return await self._recv()
            if deadline is not None and time.monotonic() >= deadline:
                raise Empty


class WakefulKernelClient(AsyncKernelClient):
    """jupyter's asyncio kernel client with :class:`WakefulChannel` channels."""

    shell_channel_class = Type(WakefulChannel)
    iopub_channel_class = Type(WakefulChannel)
    stdin_channel_class = Type(WakefulChannel)
    control_channel_class = Type(WakefulChannel)


class WarmKernelManager(AsyncKernelManager):
    """jupyter's kernel manager, launching ``python -m ipykernel_launcher`` kernels from the template.

    Each kernel also gets a temporary directory of its own (``TMPDIR``), removed once the
    kernel is gone: a kernel that jupyter has to kill (it waits only a few seconds for a
    clean exit, less than a loaded machine may need) cannot run its exit handlers, and its
    scratch directories would otherwise stay in /tmp.
    """

    client_factory = Type(WakefulKernelClient, klass=AsyncKernelClient)
    kernel_tmpdir: str | None = None

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        self.kernel_tmpdir = tempfile.mkdtemp(prefix="course-kernel-")
        kw["env"] = {**(kw.get("env") or os.environ), "TMPDIR": self.kernel_tmpdir}
        warm = template() if kernel_cmd[1:1 + len(LAUNCHER)] == LAUNCHER and kernel_cmd[0] == sys.executable else None
        if warm is not None and isinstance(self.provisioner, LocalProvisioner):
            self.provisioner.launch_kernel = partial(_launch_forked, self.provisioner, warm)
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if self.kernel_tmpdir is not None:  # the kernel is dead by now; its ranks follow it
            shutil.rmtree(self.kernel_tmpdir, ignore_errors=True)
            self.kernel_tmpdir = None


# ----------------------------------------------------------------------------- the template process


def _run_kernel(args: list[str], env: dict[str, str], cwd: str) -> None:
    """In the forked kernel: become ``python -m ipykernel_launcher ARGS`` in ``cwd`` with ``env``."""
    os.setsid()  # a session of its own, as jupyter_client starts kernels: interrupts reach its process group
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    sys.path[0] = cwd  # ``python -m`` puts the working directory first
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None  # the template's cached /tmp; the kernel's TMPDIR instead
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.argv = [sys.argv[0], *args]
    if "JPY_PARENT_PID" in env:  # ipykernel read it when the template imported it: name the grader again
        sys.argv.append(f"--IPKernelApp.parent_handle={env['JPY_PARENT_PID']}")  # the kernel ends with it
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()


def _serve() -> None:
    """The template: import, say ready, then fork one kernel per request line and answer its pid."""
    from helpers.cluster import LESSON_MODULES

    for name in (*PRELOAD, *LESSON_MODULES):
        __import__(name)
    gc.freeze()  # what the template holds is never garbage: a kernel's collections skip it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C for the grader is not for the template
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        read_fd, write_fd = os.pipe()
        middle = os.fork()
        if middle == 0:
            os.close(read_fd)
            kernel = os.fork()
            if kernel == 0:
                os.close(write_fd)
                try:
                    _run_kernel(request["args"], request["env"], request["cwd"])
                finally:
                    atexit._run_exitfuncs()  # the kernel's own clean-up (scratch directories, groups)
                    os._exit(0)
            os.write(write_fd, f"{kernel}\n".encode())
            os._exit(0)
        os.close(write_fd)
        with os.fdopen(read_fd) as answer:
            pid = answer.readline().strip()
        os.waitpid(middle, 0)
        print(pid, flush=True)


if __name__ == "__main__":
    _serve()
