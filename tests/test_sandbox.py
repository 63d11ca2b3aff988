"""Grading kernels run in a bubblewrap sandbox (autograder.sandbox, autograder.warm_kernels).

A kernel started the way the grader starts it (``WarmKernelManager``, mode ``required``)
runs code and torch, but sees of the course only ``helpers/`` (read-only), cannot write
outside its own directory, has no network but its own loopback, runs its ranks inside the
sandbox, works on a private copy of its working directory, answers interrupts, and leaves
nothing behind. Without bubblewrap, ``required`` refuses to grade with a plain message.
"""
from __future__ import annotations

import ast
import os
import signal
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.utils import run_sync

from autograder import sandbox, warm_kernels
from autograder.sandbox import SandboxUnavailable
from autograder.warm_kernels import WarmKernelManager, start_template, use_sandbox

pytestmark = pytest.mark.skipif(not sandbox.available(), reason="bubblewrap cannot start sandboxes here")
ROOT = Path(sandbox.helpers_dir()).parent
START_S = 120  # a kernel's start on a loaded 2-core machine (the template's first start included)


class Kernel:
    """A sandboxed kernel started by WarmKernelManager in ``cwd``, and its client."""

    def __init__(self, cwd: Path) -> None:
        self.km = WarmKernelManager(kernel_name="python3")
        run_sync(self.km.start_kernel)(cwd=str(cwd))
        self.kc = self.km.client()
        self.kc.start_channels()
        run_sync(self.kc.wait_for_ready)(timeout=START_S)

    def run(self, code: str, expression: str = "None", timeout: float = 60) -> object:
        """Run ``code``, then return the kernel's value of ``expression``, a Python literal.

        The value comes with the execute reply (``user_expressions``), not as output, which
        ipykernel may publish after the reply.
        """
        reply = run_sync(self.kc.execute_interactive)(code, user_expressions={"v": expression}, timeout=timeout,
                                                       output_hook=lambda msg: None)["content"]
        assert reply["status"] == "ok", f"{reply.get('ename')}: {reply.get('evalue')}"
        value = reply["user_expressions"]["v"]
        assert value["status"] == "ok", f"{value.get('ename')}: {value.get('evalue')}"
        return ast.literal_eval(value["data"]["text/plain"])

    def value(self, expression: str) -> object:
        """The kernel's value of ``expression``, a Python literal."""
        return self.run("", expression)

    def shut_down(self) -> None:
        self.kc.stop_channels()
        run_sync(self.km.shutdown_kernel)()


@pytest.fixture(scope="module")
def submission(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("submission")
    (folder / "answer.ipynb").write_text("{}")
    return folder


@pytest.fixture(scope="module")
def kernel(submission):
    kernel = Kernel(submission)
    yield kernel
    kernel.shut_down()


def test_a_sandboxed_kernel_runs_code_and_torch(kernel):
    assert kernel.value("__import__('torch').ones(3).sum().item()") == 3.0
    assert kernel.value("__import__('os').getppid()") == 1  # its parent, the template, is the sandbox's init
    assert kernel.value("b'kernel_template.py' in open('/proc/1/cmdline', 'rb').read()")


def test_the_course_is_invisible_but_helpers(kernel):
    kernel.run("import importlib.util, os, sys")
    assert kernel.value("importlib.util.find_spec('autograder')") is None
    python = {Path(p).relative_to(ROOT).parts[0] for p in sandbox.python_dirs() if Path(p).is_relative_to(ROOT)}
    assert set(kernel.value(f"os.listdir({str(ROOT)!r})")) == {"helpers", *python}  # the venv may live there
    for name in ("autograder", "source", "gradebook.db", ".git", "pyproject.toml"):
        assert not kernel.value(f"os.path.exists({str(ROOT / name)!r})"), name
    assert kernel.value("[m for m in sys.modules if m.split('.')[0] == 'autograder']") == []
    if str(ROOT) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):  # (a copy of the course run from it)
        assert kernel.value(f"[p for p in sys.path if p.rstrip('/') == {str(ROOT)!r}]") == []
    assert not kernel.value("any(os.path.exists(p) for p in ('/root/.bashrc', '/sys/class', '/home', '/var'))")
    shadow = "def shadow():\n    try:\n        return open('/etc/shadow').read()\n    except OSError as e:\n" \
             "        return type(e).__name__\n"
    assert kernel.run(shadow, "shadow()") in ("", "PermissionError")  # masked: root's own files
    assert kernel.value("os.environ['HOME'].startswith(os.path.dirname(os.getcwd()))")  # its own directory


ATTEMPT = """
def attempt(action, *args):
    try:
        action(*args)
        return "done"
    except OSError as e:
        return type(e).__name__
"""


def test_helpers_python_and_the_root_are_read_only(kernel):
    kernel.run(ATTEMPT)
    for folder in (sandbox.helpers_dir(), sys.prefix, os.path.realpath(sys.base_prefix), "/usr", "/", "/opt/course"):
        target = os.path.join(folder, "planted.py")
        result = kernel.value(f"attempt(open, {target!r}, 'w')")
        assert result in ("PermissionError", "OSError", "FileNotFoundError"), (folder, result)
        assert not os.path.exists(target), target


ECHO = """
def echo():
    with socket.socket() as server:
        server.bind(('127.0.0.1', 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            accepted, _ = server.accept()
            client.sendall(b'ok')
            with accepted:
                return accepted.recv(2)
"""


def test_memory_is_bounded(kernel):
    code = ("import resource, torch\ndef allocate(n):\n    try:\n"
            "        return torch.empty(n, dtype=torch.uint8).numel()\n"
            "    except (RuntimeError, MemoryError) as e:\n        return type(e).__name__\n")
    limit = warm_kernels.MEMORY_LIMIT_BYTES
    assert kernel.run(code, "resource.getrlimit(resource.RLIMIT_AS)") == (limit, limit)
    assert kernel.value(f"allocate({limit})") == "RuntimeError"  # torch's "can't allocate memory"
    assert kernel.value(f"allocate({1 << 28})") == 1 << 28


def test_no_network_but_its_own_loopback(kernel):
    kernel.run(ATTEMPT + "import socket")
    with socket.socket() as server:  # a port open on the host's loopback
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert kernel.value(f"attempt(socket.create_connection, ('127.0.0.1', {port}), 5)") == "ConnectionRefusedError"
    assert kernel.value("sorted(n for _, n in socket.if_nameindex())") == ["lo"]
    assert kernel.run(ECHO, "echo()") == b"ok"


WHERE = """
import os
import torch.distributed as dist
from helpers.runtime.cluster import run

def where():
    with open('/proc/1/cmdline', 'rb') as f:
        init = f.read()
    return dist.get_rank(), os.getpid(), init, os.path.exists(%r)
"""


def test_ranks_run_inside_the_sandbox(kernel):
    kernel.run(WHERE % str(ROOT / "autograder"))
    ranks = kernel.value("run(where, world_size=2)")
    assert [r[0] for r in ranks] == [0, 1]
    assert all(b"kernel_template.py" in r[2] and not r[3] for r in ranks)  # in the sandbox's pid namespace
    warm = warm_kernels.template(sandboxed=True)
    assert all(sandbox.host_pid(warm.process.pid, r[1]) for r in ranks)  # the pids are the sandbox's own


TRACE = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
server = [int(p) for p in os.listdir('/proc')
          if p.isdigit() and b'forkserver' in open(f'/proc/{p}/cmdline', 'rb').read()]
"""


def test_the_template_and_forkserver_cannot_be_traced_or_killed(kernel, tmp_path):
    warm = warm_kernels.template(sandboxed=True)  # before the signals: a dead one would be replaced by a new one
    kernel.run("import os")
    attached = kernel.run(TRACE, "[libc.ptrace(16, pid, 0, 0) for pid in (os.getppid(), *server)]")  # ATTACH
    assert len(attached) >= 2 and set(attached) == {-1}  # the template, the forkserver and the ranks it forked
    kernel.run("import signal\nfor s in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n    os.kill(1, s)")
    # Not a sleep to give the signals time: the next kernel is a round trip through the template,
    # which reads that request after the signals were sent, and a process acts on a pending signal
    # before it reads on. A killed or stopped template forks no kernel: the manager then stops it and
    # starts the kernel in a sandbox of its own, whose pid 1 is bwrap, not the template.
    other = Kernel(tmp_path)
    try:
        assert other.value("b'kernel_template.py' in open('/proc/1/cmdline', 'rb').read()")
    finally:
        other.shut_down()
    assert warm_kernels.template(sandboxed=True) is warm and warm.alive()
    assert psutil.Process(warm.process.pid).children()[0].status() != psutil.STATUS_STOPPED


def test_work_is_private_and_removed_with_the_kernel(submission):
    other = Kernel(submission)
    try:
        kernel_dir = Path(other.km.kernel_dir)
        assert other.value("sorted(__import__('os').listdir('.'))") == ["answer.ipynb"]
        other.run("open('answer.ipynb', 'w').write('changed'); open('new.txt', 'w').write('new')")
        assert sorted(p.name for p in submission.iterdir()) == ["answer.ipynb"]
        assert (submission / "answer.ipynb").read_text() == "{}"
        assert kernel_dir.is_dir()
    finally:
        other.shut_down()
    assert not kernel_dir.exists()


def _await_output(kernel: Kernel, msg_id: str, text: str) -> None:
    """Wait until request ``msg_id`` has printed ``text``, i.e. its code is running.

    Each message is waited for at most ``START_S``: a hang guard, not a speed limit.
    """
    while True:
        msg = run_sync(kernel.kc.get_iopub_msg)(timeout=START_S)
        if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream"
                and text in msg["content"]["text"]):
            return


def _below(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def test_interrupt_works_and_shutdown_leaves_nothing(tmp_path):
    warm = start_template("required")
    before = _below(warm.process.pid)
    other = Kernel(tmp_path)
    try:
        other.run("from helpers.runtime.cluster import run\nrun(lambda: 1, world_size=2)")
        assert len(_below(warm.process.pid) - before) >= 3  # the kernel and its two ranks
        # stop_on_error=False: ipykernel would otherwise abort requests that arrive soon after the interrupt
        msg_id = other.kc.execute("import time\nprint('sleeping', flush=True)\ntime.sleep(600)", stop_on_error=False)
        _await_output(other, msg_id, "sleeping")  # interrupted while it runs, not before it started
        run_sync(other.km.interrupt_kernel)()
        # The reply is the outcome: without the interrupt the cell would sleep 600 s and end "ok";
        # START_S only turns a lost reply into a failure.
        reply = run_sync(other.kc.get_shell_msg)(timeout=START_S)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["content"]["ename"] == "KeyboardInterrupt"
        assert other.value("1 + 1") == 2  # the kernel lives on
    finally:
        other.shut_down()
    deadline = time.monotonic() + 60  # they end with the kernel; the wait only turns a hang into a failure
    while _below(warm.process.pid) - before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _below(warm.process.pid) - before
    assert warm.alive()


def test_required_refuses_to_grade_without_bubblewrap(monkeypatch, tmp_path):
    monkeypatch.setattr(sandbox, "available", lambda: False)
    with pytest.raises(SandboxUnavailable, match=r"^bubblewrap \(Debian package `bubblewrap`\) is needed to "
                                                  r"grade for credit"):
        start_template("required")
    with pytest.raises(SandboxUnavailable):
        run_sync(WarmKernelManager(kernel_name="python3").start_kernel)(cwd=str(tmp_path))
    assert use_sandbox("optional") is False and use_sandbox("off") is False


def test_a_stale_pid_is_never_signalled():
    """A kernel that is not this process's child is signalled only while its pid still names it."""
    shell = psutil.Popen(["sh", "-c", "sleep 30 & echo $!; wait"], stdout=__import__("subprocess").PIPE, text=True)
    sleeper = psutil.Process(int(shell.stdout.readline()))  # not our child: sh's
    try:
        kernel = warm_kernels.ForkedKernel(sleeper.pid, started=sandbox.start_time(sleeper.pid) + 1)
        assert kernel.poll() is not None  # a later process than the one recorded
        kernel.send_signal(signal.SIGKILL)
        assert sleeper.is_running()
    finally:
        sleeper.kill()
        shell.wait()


def test_what_a_kernel_leaves_in_shared_places_is_gone_for_the_next(monkeypatch, tmp_path):
    """A grading process grades one submission after another in one sandbox (grade-class)."""
    monkeypatch.setattr(warm_kernels, "_templates", {})  # a sandbox of this test's own, with no other kernel
    first = Kernel(tmp_path)
    try:
        scratch = warm_kernels.template(sandboxed=True).scratch
        first.run(f"open('/tmp/left.txt', 'w').write('x'); open({scratch + '/left.txt'!r}, 'w').write('x')\n"
                  f"__import__('os').chmod({scratch!r}, 0)")
    finally:
        first.shut_down()
    second = Kernel(tmp_path)
    try:
        assert "left.txt" not in second.value("__import__('os').listdir('/tmp')")  # there: the scratch directory
        assert not os.path.exists(os.path.join(scratch, "left.txt"))
    finally:
        second.shut_down()
        warm_kernels.template(sandboxed=True).close()


def test_the_environment_keeps_the_cpu_settings_and_drops_the_rest(tmp_path) -> None:
    """The kernel rounds as its grader asked (ATEN_/MKL_/OMP_ pass, so a check run as another CPU is one);
    host paths and secrets do not reach it."""
    env = sandbox.sandbox_env({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
                               "AWS_SECRET_ACCESS_KEY": "x", "VIRTUAL_ENV": "/host/venv"}, str(tmp_path))
    assert {k: env[k] for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "OMP_NUM_THREADS")} == \
        {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}
    assert "AWS_SECRET_ACCESS_KEY" not in env and "VIRTUAL_ENV" not in env


def test_processes_are_bounded(kernel):
    """A fork bomb stops at PROCESS_LIMIT tasks in the sandbox (a pids cgroup for a root grader, RLIMIT_NPROC else)."""
    code = ("import os, signal, time\ndef forks(n):\n    kids = []\n    try:\n        for _ in range(n):\n"
            "            pid = os.fork()\n            if pid == 0:\n"
            "                time.sleep(60)\n                os._exit(0)\n"
            "            kids.append(pid)\n    except OSError as e:\n        pass\n    for pid in kids:\n"
            "        os.kill(pid, signal.SIGKILL)\n        os.waitpid(pid, 0)\n    return len(kids)\n")
    started = kernel.run(code, f"forks({2 * sandbox.PROCESS_LIMIT})", timeout=120)
    assert 0 < started < sandbox.PROCESS_LIMIT
    assert kernel.value("forks(8)") == 8  # the processes are gone, and the kernel goes on


@pytest.mark.skipif(sandbox._pids_cgroup() is None, reason="no pids cgroup can be made here")
def test_empty_sandbox_cgroups_left_by_killed_graders_are_removed():
    left = sandbox.ProcessLimit.make()  # as a grader killed before its template ended would leave it
    young = sandbox.ProcessLimit.make()
    long_ago = time.time() - 2 * sandbox.STALE_CGROUP_S
    os.utime(left.directory, (long_ago, long_ago))
    fresh = sandbox.ProcessLimit.make()  # each new sandbox cgroup sweeps the stale ones first
    assert not os.path.exists(left.directory) and os.path.isdir(young.directory)
    for limit in (young, fresh):
        limit.remove()
