"""Grading kernels forked from the warm template (autograder.warm_kernels) behave like fresh ones.

The grader's kernel manager forks each kernel from a process that imported torch and
ipykernel; jupyter must still see an ordinary kernel: its own environment and working
directory, interrupts that reach it, a shutdown that leaves no process behind. Its client
notices a reply even when pyzmq's asyncio poll is not woken for it. The first test is of
kernels without the sandbox (mode ``off``, the book's); tests/test_sandbox.py tests the
sandboxed ones, which the others here start (mode ``required``, the default). A test whose
grader must be a child subreaper runs that grader as a process of its own: pytest's process
stays as it was for the rest of the session.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session
from nbclient import NotebookClient
from nbclient.util import run_sync
from nbformat.v4 import new_code_cell, new_notebook

import autograder.warm_kernels as warm_kernels
from autograder.warm_kernels import POLL_SLICE_S, WakefulChannel, WarmKernelManager

PROBE = ("import os, sys\n"
         "print(os.getpid(), os.getppid(), 'torch' in sys.modules, os.getcwd(), "
         "os.environ.get('COURSE_TEST_VAR'), sys.path[0])")


# A grader of its own: an unsandboxed kernel is forked only for a child subreaper, which pytest's
# process must not become for the rest of the session. It prints (its pid, the cells' outputs,
# whether the kernel had ended once jupyter shut it down) as JSON.
FRESH_GRADER = """
import json, os, signal, sys, time
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config
from autograder.processes import alive, become_subreaper
from autograder.warm_kernels import WarmKernelManager, template

probe, loop, path = sys.argv[1:4]
become_subreaper()
assert template() is not None
os.environ["COURSE_TEST_VAR"] = "from-the-grader"
nb = new_notebook(cells=[new_code_cell(probe), new_code_cell(loop), new_code_cell("print('still here')")])
# The endless cell is interrupted at its 5 s limit; for the others the limit only turns a hang into a failure.
client = NotebookClient(nb, kernel_name="python3", timeout_func=lambda cell: 5 if cell.source == loop else 120,
                        interrupt_on_timeout=True, allow_errors=True, kernel_manager_class=WarmKernelManager,
                        resources={"metadata": {"path": path}},
                        config=Config({"WarmKernelManager": {"sandbox": "off"}}))
client.execute()
kernel = int(nb.cells[0].outputs[0].text.split()[0])
deadline = time.monotonic() + 60  # jupyter has shut it down: a hang guard, not a speed limit
while alive(kernel) and time.monotonic() < deadline:
    time.sleep(0.1)
ended = not alive(kernel)
if not ended:
    os.kill(kernel, signal.SIGKILL)
print(json.dumps({"grader": os.getpid(), "outputs": [cell.outputs for cell in nb.cells], "ended": ended}))
"""


def test_a_forked_kernel_is_a_fresh_kernel_of_this_process(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", FRESH_GRADER, PROBE, "while True:\n    pass", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    outputs = report["outputs"]

    pid, ppid, preloaded, cwd, var, path0 = outputs[0][0]["text"].split()
    assert int(ppid) == report["grader"]  # re-parented to the grader: jupyter polls and reaps it
    assert preloaded == "True"  # torch came with the fork
    assert cwd == path0 == str(tmp_path)
    assert var == "from-the-grader"
    assert outputs[1][-1]["ename"] == "KeyboardInterrupt"  # the interrupt reached it
    assert outputs[2][0]["text"] == "still here\n"
    assert report["ended"], "the kernel outlived its shutdown"


def test_a_dead_template_costs_speed_not_the_grading(tmp_path: Path, monkeypatch) -> None:
    dead = warm_kernels.Template(sandboxed=True)
    dead.process.kill()
    dead.process.wait()
    monkeypatch.setattr(dead, "alive", lambda: True)  # as if it died between the check and the request
    monkeypatch.setitem(warm_kernels._templates, True, dead)
    nb = new_notebook(cells=[new_code_cell("import os\nprint('ran', open('/proc/1/cmdline').read().split(chr(0))[0])")])
    NotebookClient(nb, kernel_name="python3", timeout=60, kernel_manager_class=WarmKernelManager,
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert nb.cells[0].outputs[0].text.startswith("ran ")  # started the usual way,
    assert nb.cells[0].outputs[0].text.strip().endswith("bwrap")  # in a sandbox of its own
    dead.close()


def test_a_forked_kernel_runs_its_exit_handlers(tmp_path: Path) -> None:
    """helpers.l10_worker_failure.scratch_directory() promises removal at exit; a forked kernel must keep it."""
    nb = new_notebook(cells=[new_code_cell("from helpers.l10_worker_failure import scratch_directory\n"
                                           "print(scratch_directory())")])
    NotebookClient(nb, kernel_name="python3", timeout=60, kernel_manager_class=WarmKernelManager,
                   resources={"metadata": {"path": str(Path.cwd())}}).execute()
    scratch = Path(nb.cells[0].outputs[0].text.strip())
    assert scratch.name.startswith("course-checkpoints-")
    assert not scratch.exists()


def test_a_killed_kernel_leaves_no_scratch_directory(tmp_path: Path) -> None:
    """Under load jupyter may kill a kernel before its exit handlers run; its temporary directory goes with it."""
    nb = new_notebook(cells=[new_code_cell("from helpers.l10_worker_failure import scratch_directory\n"
                                           "print(scratch_directory())")])
    client = NotebookClient(nb, kernel_name="python3", timeout=60, kernel_manager_class=WarmKernelManager,
                            resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        client.execute_cell(nb.cells[0], 0)
        kernel_tmpdir = Path(client.km.kernel_tmpdir)
        run_sync(client.km.shutdown_kernel)(now=True)  # SIGKILL: no exit handler runs
    scratch = Path(nb.cells[0].outputs[0].text.strip())
    assert scratch.parent == kernel_tmpdir
    assert not kernel_tmpdir.exists()


class Clock:
    """A fake ``time`` module for autograder.warm_kernels: ``monotonic()`` moves only while a poll waits."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class UnwokenSocket(zmq.asyncio.Socket):
    """A socket whose ``poll`` is not woken by an arriving message: it sees one only when its timeout ends.

    Its waits pass on :attr:`clock` (a :class:`Clock`) without taking time, so what a test sees
    is how the channel slices its wait, however loaded the machine.
    """

    clock: Clock | None = None
    arrives_at = 0.0  # clock time from which the message is there
    frames: list[bytes] = []
    polls: list[int] = []  # the timeout of each poll, in milliseconds

    async def poll(self, timeout=None, flags=zmq.POLLIN):  # noqa: ANN001
        self.polls.append(timeout)
        if len(self.polls) > 10_000:  # in fake time a wait that never ends would loop for ever
            raise AssertionError("get_msg kept polling past its timeout")
        if timeout:
            self.clock.now += timeout / 1000
        await asyncio.sleep(0)
        return zmq.POLLIN if self.clock.now >= self.arrives_at else 0

    async def recv_multipart(self, *args, **kwargs):  # noqa: ANN002, ANN003
        return self.frames


def test_a_reply_is_noticed_even_when_the_poll_is_not_woken(monkeypatch) -> None:
    """A reply that arrives 0.1 s into a 30 s wait is read within a slice of its arrival, not after 30 s.

    On a fake clock: the check is of the mechanism (no poll longer than a slice), not a timing.
    """
    clock = Clock()
    monkeypatch.setattr(warm_kernels, "time", clock)
    session = Session()
    context = zmq.asyncio.Context()
    socket = UnwokenSocket(context, zmq.PAIR)
    socket.clock, socket.polls = clock, []
    socket.frames = session.serialize(session.msg("execute_reply", {"status": "ok"}))
    try:
        socket.arrives_at = 0.1
        reply = asyncio.run(WakefulChannel(socket, session).get_msg(timeout=30))
        assert reply["msg_type"] == "execute_reply"
        assert max(socket.polls) <= POLL_SLICE_S * 1000
        assert socket.arrives_at <= clock.now <= socket.arrives_at + POLL_SLICE_S  # a single 30 s poll: 30

        clock.now, socket.polls, socket.arrives_at = 0.0, [], float("inf")  # nothing comes: the timeout still holds
        with pytest.raises(Empty):
            asyncio.run(WakefulChannel(socket, session).get_msg(timeout=1))
        assert max(socket.polls) <= POLL_SLICE_S * 1000
        assert clock.now == pytest.approx(1.0)  # waited out, slice by slice, and no longer
    finally:
        socket.close(linger=0)
        context.term()


GRADER = """
import sys, time
from jupyter_client.utils import run_sync
from autograder.processes import become_subreaper
from autograder.warm_kernels import WarmKernelManager, start_template
become_subreaper()
warm = start_template()
manager = WarmKernelManager(kernel_name="python3")
run_sync(manager.start_kernel)()
client = manager.client()
client.start_channels()
# It answers only once it runs: ipykernel starts the parent poller before the kernel itself.
run_sync(client.wait_for_ready)(timeout=120)
print(manager.provisioner.pid, warm.scratch, flush=True)
time.sleep(600)  # until it is killed
"""
# The grader's parent, a child subreaper as a grader's parent may be (pytest's process must not
# become one for the rest of the session): it kills the grader and says whether the kernel ended.
GRADERS_PARENT = """
import os, shutil, signal, subprocess, sys, time
from autograder.processes import alive, become_subreaper
become_subreaper()  # the orphaned kernel comes to this process
grader = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
pid, scratch = grader.stdout.readline().split()
kernel = int(pid)
grader.kill()
grader.wait()
deadline = time.monotonic() + 60  # a hang guard, not a speed limit
while alive(kernel) and time.monotonic() < deadline:
    time.sleep(0.2)
ended = not alive(kernel)
if not ended:
    os.kill(kernel, signal.SIGKILL)
try:
    os.waitpid(kernel, 0)
except ChildProcessError:
    pass
shutil.rmtree(scratch, ignore_errors=True)  # the killed grader could not remove its sandbox's scratch directory
print("ended" if ended else "outlived", flush=True)
"""


def test_a_forked_kernel_ends_when_its_grader_is_killed(tmp_path: Path) -> None:
    """As jupyter's own kernels do (JPY_PARENT_PID), though the template imported ipykernel before it was set."""
    done = subprocess.run([sys.executable, "-c", GRADERS_PARENT, GRADER], capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)  # a hang guard
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["ended"], "the kernel outlived its grader"
