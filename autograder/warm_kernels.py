"""Grading kernels forked from a warm template, in a sandbox: fresh kernels without torch's and ipykernel's start-up.

Every grading needs a fresh kernel, and a fresh ``python -m ipykernel_launcher`` spends
about 1.5 CPU seconds importing ipykernel, torch and torch._dynamo before the notebook's
first cell runs. A grading process (``nbgrader autograde``, ``grade-class``, the course
check) instead starts one *template* process (:mod:`autograder.kernel_template`) that has
imported them and the course's lesson modules, and has started the one forkserver the
kernels' ranks are forked from; each kernel is a fork of it, with the launcher's arguments,
environment and working directory, whose first cell finds those modules already imported.
No notebook code ever runs in the template, so one grading cannot leave anything behind
for the next.

**The sandbox.** Student code is hostile, so the template, and with it every kernel and
every process a kernel starts, runs in a bubblewrap sandbox (:mod:`autograder.sandbox`)
that sees the OS, Python and ``helpers/`` read-only and one scratch directory. Each kernel
gets a fresh subdirectory of it (removed once the kernel is gone) holding its connection
file and ZMQ ``ipc`` sockets (no network is shared with the sandbox), its working directory
(a private copy of the directory jupyter asked for: nbgrader's submission folder) and its
home, ``TMPDIR``, ``IPYTHONDIR`` and ``MPLCONFIGDIR``. Its environment keeps only harmless
variables (:func:`autograder.sandbox.sandbox_env`), and every process in the sandbox may
map at most ``MEMORY_LIMIT_BYTES`` of address space.

The knob is :attr:`WarmKernelManager.sandbox`, set in the nbgrader config
(``c.WarmKernelManager.sandbox``, see ``autograder/nbgrader_config.py``); its modes
(:data:`MODES`):

* ``required`` (the default: ``nbgrader autograde``, ``grade-class``, ``check``): no
  kernel starts outside the sandbox; without bubblewrap grading is refused with
  :class:`autograder.sandbox.SandboxUnavailable`.
* ``optional`` (self-study, ``python -m autograder grade``): sandboxed where bubblewrap
  works, else graded without it, with the plain warning :data:`UNSANDBOXED`.
* ``off`` (the book's chapters: course content, not student code): no sandbox.

Without a sandbox the kernel is forked twice (template -> short-lived middle -> kernel),
so it is re-parented to the grading process, which :mod:`autograder.processes` makes a child
subreaper, and kernels start the usual way where that is not so. In the sandbox the template
is the kernels' parent and reaper; the grader signals and polls a kernel by its host pid,
which it finds from the sandbox pid the template answers (:func:`autograder.sandbox.host_pid`).
A kernel that cannot be forked (no template, or a command other than the launcher) starts the
usual way, in a sandbox of its own.

The manager's kernel client waits for messages in slices of ``POLL_SLICE_S`` (see
:class:`WakefulChannel`), so a reply is never noticed later than one slice after it arrived.
"""
from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from queue import Empty
from typing import Any, Callable

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Enum, Type

from . import sandbox as bubblewrap
from .kernel_template import remove_entry
from .processes import alive, is_subreaper
from .sandbox import SandboxUnavailable

LAUNCHER = ["-m", "ipykernel_launcher"]
FORK_TIMEOUT_S = 30  # a template that does not answer by then is replaced by the usual launch
POLL_SLICE_S = 0.25  # the longest a message that has arrived can wait unnoticed
MODES = ("required", "optional", "off")
MEMORY_LIMIT_BYTES = 4 << 30  # address space of each sandboxed process (RLIMIT_AS); torch and gloo use ~1.4 GiB
COPY_LIMIT_BYTES = 64 << 20  # of the working directory's files copied into a sandboxed kernel's own
COPY_LIMIT_FILES = 2000  # files (and links) copied at most; a submission folder holds a few
TEMPLATE_SCRIPT = Path(__file__).with_name("kernel_template.py")
SANDBOX_SCRIPT = "/opt/course/kernel_template.py"  # where the sandbox sees it (alone: not the autograder package)
TEMPLATE_HOME = "template"  # the template's home in the scratch directory; the kernels' are beside it
UNSANDBOXED = "graded WITHOUT a sandbox: fine for self-study, not fit for credit (install bubblewrap to grade in one)"
log = logging.getLogger(__name__)


class ForkedKernel:
    """The part of :class:`subprocess.Popen` jupyter's provisioner uses, for a kernel this process did not spawn.

    ``started`` (:func:`autograder.sandbox.start_time`) tells the kernel from a later process
    that got its pid: a kernel that is not this process's child is signalled only while both match.
    """

    stdin = stdout = stderr = None

    def __init__(self, pid: int, started: int | None = None) -> None:
        self.pid = pid
        self.started = started
        self.returncode: int | None = None

    def _alive(self) -> bool:
        return alive(self.pid) and (self.started is None or bubblewrap.start_time(self.pid) == self.started)

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # already reaped (autograder.processes, the sandbox's template) or never ours
                pid, status = self.pid, None
                if self._alive():
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
        """Signal the kernel's process group (it leads one, as jupyter's kernels do), while the kernel lives."""
        if self.poll() is None:
            try:
                os.killpg(self.pid, signum)
            except ProcessLookupError:  # not a group leader after all
                try:
                    os.kill(self.pid, signum)
                except ProcessLookupError:
                    pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# PR_SET_PDEATHSIG (bwrap --die-with-parent) fires when the *thread* that started the sandbox
# ends: start sandboxes from one thread that lives as long as this process.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="course-sandbox")


class Template:
    """The template process and the pipe that asks it for kernels (one request at a time).

    ``sandboxed``: it runs in a sandbox whose scratch directory is ``scratch`` (kernels get
    subdirectories of it); else it runs as this process's child.
    """

    def __init__(self, sandboxed: bool = False) -> None:
        self.lock = threading.Lock()  # kernels started at once (the book's chapters) ask from several threads
        self.owner = os.getpid()  # a forked child of this process must not end it (see _forget_in_child)
        self.sandboxed = sandboxed
        self.scratch: str | None = None
        self.limit: bubblewrap.ProcessLimit | None = None
        if sandboxed:
            self.scratch = tempfile.mkdtemp(prefix="course-sandbox-")
            # The template is the sandbox's init: no kernel can kill or stop it, and all ends with it.
            binds = {str(TEMPLATE_SCRIPT): SANDBOX_SCRIPT}
            self.limit = bubblewrap.ProcessLimit.make()
            argv = [*(self.limit.argv() if self.limit else []),
                    *bubblewrap.bwrap_argv(self.scratch, cwd="/", ro_binds=binds, as_pid_1=True), "--", sys.executable,
                    SANDBOX_SCRIPT, "--sandboxed", self.scratch, "--memory-limit", str(MEMORY_LIMIT_BYTES),
                    "--process-limit", str(bubblewrap.PROCESS_LIMIT)]
            home = os.path.join(self.scratch, TEMPLATE_HOME)
            bubblewrap.make_home(home)
            env = bubblewrap.sandbox_env(dict(os.environ), home)
        else:
            argv, env = [sys.executable, str(TEMPLATE_SCRIPT)], None
        self.process = _spawner.submit(subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, text=True, env=env).result()
        atexit.register(self.close)
        if self.process.stdout.readline().strip() != "ready":
            self.close()
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
        if not self.sandboxed:
            return ForkedKernel(int(reply))
        pid = bubblewrap.host_pid(self.process.pid, int(reply))
        if pid is None:
            raise RuntimeError(f"the sandbox has no process {int(reply)}")
        return ForkedKernel(pid, bubblewrap.start_time(pid))

    def stop(self) -> None:
        """End the template, and with it its sandbox and every process in it."""
        if self.process.poll() is None:
            if self.sandboxed:  # the template first, the sandbox's init: bwrap reaps it and exits (no orphan)
                for pid in bubblewrap.children(self.process.pid):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.process.wait(timeout=5 if self.sandboxed else 0)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()

    def close(self, keep_live: bool = False) -> None:
        """:meth:`stop`, and remove the scratch directory (with ``keep_live``, not the directories of live kernels)."""
        if os.getpid() != self.owner:
            return
        self.stop()
        if self.limit is not None:
            self.limit.remove()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:  # a request was cut short
                pass
        if self.scratch is None or not os.path.isdir(self.scratch):
            return
        for entry in os.scandir(self.scratch):  # a kernel started the usual way may still use its own
            if not (keep_live and entry.path in _kernel_dirs):
                remove_entry(entry)
        try:
            os.rmdir(self.scratch)
        except OSError:  # not empty: at exit, then
            pass


_templates: dict[bool, Template] = {}
_kernel_dirs: set[str] = set()  # the directories of this process's sandboxed kernels that have not ended
_warned = False


def _forget_in_child() -> None:
    """In a forked child: the parent's templates and spawner thread are not the child's."""
    global _spawner
    _templates.clear()
    _spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="course-sandbox")


os.register_at_fork(after_in_child=_forget_in_child)


def template(sandboxed: bool = False) -> Template | None:
    """This process's kernel template (in a sandbox or not), started on first use; None: start kernels the usual way."""
    if not sys.platform.startswith("linux") or not (sandboxed or is_subreaper()):
        return None
    current = _templates.get(sandboxed)
    if current is None or not current.alive():
        if current is not None:
            current.close(keep_live=True)
        try:
            _templates[sandboxed] = Template(sandboxed)
        except (OSError, RuntimeError):
            _templates.pop(sandboxed, None)
    return _templates.get(sandboxed)


def use_sandbox(mode: str) -> bool:
    """Whether kernels run in the sandbox in ``mode`` (:data:`MODES`); SandboxUnavailable where it must and cannot."""
    global _warned
    if mode not in MODES:
        raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return False
    if bubblewrap.available():
        return True
    if mode == "required":
        raise SandboxUnavailable(bubblewrap.unavailable_reason() or "it does not work here")
    if not _warned:
        log.warning("%s (%s)", UNSANDBOXED, bubblewrap.unavailable_reason())
        _warned = True
    return False


def start_template(mode: str = "required") -> Template | None:
    """Start (or find) the template kernels in ``mode`` are forked from; SandboxUnavailable as :func:`use_sandbox`."""
    return template(use_sandbox(mode))


def sandbox_mode(manager_class: type, config: Any = None) -> str:
    """The sandbox mode of the kernels ``manager_class`` starts with ``config`` ("off": not a WarmKernelManager)."""
    if not (isinstance(manager_class, type) and issubclass(manager_class, WarmKernelManager)):
        return "off"
    return manager_class(config=config).sandbox if config is not None else manager_class().sandbox


async def _launch_forked(provisioner: LocalProvisioner, warm: Template, fallback: Callable[[], list[str]],
                         cmd: list[str], **kwargs: Any):
    """``LocalProvisioner.launch_kernel``: the kernel forked from the template (if that fails, ``fallback()``'s)."""
    env = dict(kwargs.get("env") or os.environ)
    env["JPY_PARENT_PID"] = str(os.getpid())  # as jupyter_client's launcher sets it: the kernel ends with us
    cwd = str(kwargs.get("cwd") or Path.cwd())
    try:
        process = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
            None, warm.fork_kernel, cmd[len(LAUNCHER) + 1:], env, cwd), FORK_TIMEOUT_S)
    except (OSError, RuntimeError, ValueError, asyncio.TimeoutError):
        warm.stop()  # a template that failed once is not asked again
        return await LocalProvisioner.launch_kernel(provisioner, fallback(), **kwargs)
    # No pgid: jupyter then signals through ForkedKernel, which makes sure the pid is still the kernel's.
    provisioner.process, provisioner.pid, provisioner.pgid, provisioner.cwd = process, process.pid, None, cwd
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


def _course_root() -> str:
    return os.path.dirname(bubblewrap.helpers_dir())


def _holds(folder: str, path: str) -> bool:
    """Whether ``path`` is ``folder`` or below it (both real paths)."""
    return os.path.commonpath([folder, path]) == folder


def private_copy(source: str, target: str, limit: int = COPY_LIMIT_BYTES, files: int = COPY_LIMIT_FILES) -> None:
    """Copy the files below ``source`` into ``target``, at most ``limit`` bytes and ``files`` files; links stay links.

    Hidden entries (``.git``, checkpoints) and folders holding ``target`` (the sandboxes'
    scratch directories, when ``source`` is /tmp) are left out, and so is everything when
    ``source`` holds the course root: the sandbox must not see the course's own files.
    """
    root, target = os.path.realpath(source), os.path.realpath(target)
    if not os.path.isdir(root) or _holds(root, _course_root()):
        return
    total = 0
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and not _holds(os.path.join(top, d), target)
                   and not _holds(target, os.path.join(top, d))]
        here = os.path.join(target, os.path.relpath(top, root))
        os.makedirs(here, exist_ok=True)
        for name in names:
            path = os.path.join(top, name)
            if files <= 0:
                return
            if os.path.islink(path):
                os.symlink(os.readlink(path), os.path.join(here, name))
                files -= 1
            elif not name.startswith(".") and os.path.isfile(path) and total + os.path.getsize(path) <= limit:
                total += os.path.getsize(path)
                files -= 1
                shutil.copy2(path, os.path.join(here, name))


class WarmKernelManager(AsyncKernelManager):
    """jupyter's kernel manager, launching ``python -m ipykernel_launcher`` kernels from the template, sandboxed.

    Each kernel also gets a directory of its own, removed once the kernel is gone: in the
    sandbox :attr:`kernel_dir` (see the module docstring), else a temporary directory
    (``TMPDIR``). A kernel that jupyter has to kill (it waits only a few seconds for a clean
    exit, less than a loaded machine may need) cannot run its exit handlers, and its scratch
    directories would otherwise stay behind.
    """

    client_factory = Type(WakefulKernelClient, klass=AsyncKernelClient)
    sandbox = Enum(MODES, default_value="required", config=True,
                   help="Where kernels run: 'required' (a bubblewrap sandbox, or no grading), 'optional' "
                        "(the sandbox where bubblewrap works, else none, with a warning) or 'off' (no sandbox: "
                        "trusted notebooks only).")
    kernel_dir: str | None = None  # the sandboxed kernel's own directory (host path = sandbox path)
    kernel_tmpdir: str | None = None  # the kernel's TMPDIR
    process_limit: bubblewrap.ProcessLimit | None = None  # the pids cgroup of a kernel in a sandbox of its own
    sandboxed = False  # whether the kernel being started runs in the sandbox

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        self.sandboxed = use_sandbox(self.sandbox)
        if self.sandboxed:  # the connection file and sockets go where the sandboxed kernel sees them
            self.kernel_dir = self._new_kernel_dir()
            self.transport, self.ip = "ipc", os.path.join(self.kernel_dir, "zmq")
            self.connection_file = os.path.join(self.kernel_dir, "connection.json")
        return await super()._async_pre_start_kernel(**kw)

    @staticmethod
    def _new_kernel_dir() -> str:
        """A new directory for a sandboxed kernel, in the template's scratch directory (else a temporary one)."""
        warm = template(sandboxed=True)
        if warm is None:
            return tempfile.mkdtemp(prefix="course-kernel-")
        os.chmod(warm.scratch, 0o700)  # an earlier kernel may have changed it: it is the sandbox's owner
        for entry in os.scandir(warm.scratch):  # what earlier kernels left, for the next one to find
            if entry.name != TEMPLATE_HOME and entry.path not in _kernel_dirs:
                remove_entry(entry)
        path = tempfile.mkdtemp(prefix="kernel-", dir=warm.scratch)
        _kernel_dirs.add(path)
        return path

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
        launcher = kernel_cmd[1:1 + len(LAUNCHER)] == LAUNCHER and kernel_cmd[0] == sys.executable
        env = dict(kw.get("env") or os.environ)
        if self.sandboxed:
            home, cwd = os.path.join(self.kernel_dir, "home"), os.path.join(self.kernel_dir, "work")
            bubblewrap.make_home(home)
            os.makedirs(cwd, exist_ok=True)
            private_copy(str(kw.get("cwd") or Path.cwd()), cwd)
            kw.update(env=bubblewrap.sandbox_env(env, home), cwd=cwd)
            self.kernel_tmpdir = kw["env"]["TMPDIR"]
            warm = template(sandboxed=True) if launcher else None
            alone = partial(self._alone, kernel_cmd, launcher, cwd)  # made only when used: it makes a cgroup
            if warm is None or not warm.scratch or not self.kernel_dir.startswith(warm.scratch + os.sep):
                kernel_cmd, warm = alone(), None
        else:
            self.kernel_tmpdir = tempfile.mkdtemp(prefix="course-kernel-")
            kw["env"] = {**env, "TMPDIR": self.kernel_tmpdir}
            warm, alone = (template() if launcher else None), partial(list, kernel_cmd)
        if warm is not None and isinstance(self.provisioner, LocalProvisioner):
            self.provisioner.launch_kernel = partial(_launch_forked, self.provisioner, warm, alone)
        await super()._async_launch_kernel(kernel_cmd, **kw)

    def _alone(self, kernel_cmd: list[str], launcher: bool, cwd: str) -> list[str]:
        """``kernel_cmd`` in a sandbox of its own (the kernel's directory), under the memory and process limits."""
        limit = [sys.executable, "-S", "-c", "import os, resource, sys; n, p = int(sys.argv[1]), int(sys.argv[2]); "
                 "resource.setrlimit(resource.RLIMIT_AS, (n, n)); resource.setrlimit(resource.RLIMIT_NPROC, (p, p)); "
                 "os.execvp(sys.argv[3], sys.argv[3:])", str(MEMORY_LIMIT_BYTES), str(bubblewrap.PROCESS_LIMIT)]
        # Its parent is the sandbox's init, pid 1: ipykernel's parent poller would take it for an orphan.
        tail = ["--IPKernelApp.parent_handle=1"] if launcher else []
        self.process_limit = bubblewrap.ProcessLimit.make()
        join = self.process_limit.argv() if self.process_limit else []
        return [*join, *bubblewrap.bwrap_argv(self.kernel_dir, cwd=cwd), "--", *limit, *kernel_cmd, *tail]

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        for path in (self.kernel_dir, self.kernel_tmpdir):  # the kernel is dead by now; its ranks follow it
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
        if self.process_limit is not None:
            self.process_limit.remove()
            self.process_limit = None
        _kernel_dirs.discard(self.kernel_dir)
        self.kernel_dir = self.kernel_tmpdir = None
