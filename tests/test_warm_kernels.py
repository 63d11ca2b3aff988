"""Grading kernels forked from the warm template (autograder.warm_kernels) behave like fresh ones.

The grader's kernel manager forks each kernel from a process that imported torch and
ipykernel; jupyter must still see an ordinary kernel: its own environment and working
directory, interrupts that reach it, a shutdown that leaves no process behind. Its client
notices a reply even when pyzmq's asyncio poll is not woken for it. The first test is of
kernels without the sandbox (mode ``off``, the book's); tests/test_sandbox.py tests the
sandboxed ones, which the others here start (mode ``required``, the default).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from queue import Empty

import pytest
import zmq
import zmq.asyncio
from jupyter_client.session import Session
from nbclient import NotebookClient
from nbclient.util import run_sync
from nbformat.v4 import new_code_cell, new_notebook
from traitlets.config import Config

import autograder.warm_kernels as warm_kernels
from autograder.processes import alive, become_subreaper
from autograder.warm_kernels import POLL_SLICE_S, WakefulChannel, WarmKernelManager, template

UNSANDBOXED = Config({"WarmKernelManager": {"sandbox": "off"}})

PROBE = ("import os, sys\n"
         "print(os.getpid(), os.getppid(), 'torch' in sys.modules, os.getcwd(), "
         "os.environ.get('COURSE_TEST_VAR'), sys.path[0])")


def test_a_forked_kernel_is_a_fresh_kernel_of_this_process(tmp_path: Path, monkeypatch) -> None:
    become_subreaper()
    assert template() is not None
    monkeypatch.setenv("COURSE_TEST_VAR", "from-the-grader")
    nb = new_notebook(cells=[new_code_cell(PROBE), new_code_cell("while True:\n    pass"),
                             new_code_cell("print('still here')")])
    client = NotebookClient(nb, kernel_name="python3", timeout=5, interrupt_on_timeout=True, allow_errors=True,
                            kernel_manager_class=WarmKernelManager, resources={"metadata": {"path": str(tmp_path)}},
                            config=UNSANDBOXED)
    client.execute()

    pid, ppid, preloaded, cwd, var, path0 = nb.cells[0].outputs[0].text.split()
    assert int(ppid) == os.getpid()  # re-parented to the grader: jupyter polls and reaps it
    assert preloaded == "True"  # torch came with the fork
    assert cwd == path0 == str(tmp_path)
    assert var == "from-the-grader"
    assert nb.cells[1].outputs[-1].ename == "KeyboardInterrupt"  # the interrupt reached it
    assert nb.cells[2].outputs[0].text == "still here\n"
    deadline = time.monotonic() + 10
    while alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(int(pid))


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
    """helpers.restart.scratch_directory() promises removal at exit; a forked kernel must keep it."""
    become_subreaper()
    nb = new_notebook(cells=[new_code_cell("from helpers.restart import scratch_directory\n"
                                           "print(scratch_directory())")])
    NotebookClient(nb, kernel_name="python3", timeout=60, kernel_manager_class=WarmKernelManager,
                   resources={"metadata": {"path": str(Path.cwd())}}).execute()
    scratch = Path(nb.cells[0].outputs[0].text.strip())
    assert scratch.name.startswith("course-checkpoints-")
    assert not scratch.exists()


def test_a_killed_kernel_leaves_no_scratch_directory(tmp_path: Path) -> None:
    """Under load jupyter may kill a kernel before its exit handlers run; its temporary directory goes with it."""
    become_subreaper()
    nb = new_notebook(cells=[new_code_cell("from helpers.restart import scratch_directory\n"
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


class UnwokenSocket(zmq.asyncio.Socket):
    """A socket whose ``poll`` is not woken by an arriving message: it sees one only when its timeout ends."""

    arrives_at = 0.0  # time.monotonic() from which the message is there
    frames: list[bytes] = []

    async def poll(self, timeout=None, flags=zmq.POLLIN):  # noqa: ANN001
        if timeout:
            await asyncio.sleep(timeout / 1000)
        return zmq.POLLIN if time.monotonic() >= self.arrives_at else 0

    async def recv_multipart(self, *args, **kwargs):  # noqa: ANN002, ANN003
        return self.frames


def test_a_reply_is_noticed_even_when_the_poll_is_not_woken() -> None:
    """A reply that arrives 0.1 s into a 30 s wait is read within a slice, not after 30 s."""
    session = Session()
    context = zmq.asyncio.Context()
    socket = UnwokenSocket(context, zmq.PAIR)
    socket.frames = session.serialize(session.msg("execute_reply", {"status": "ok"}))
    try:
        socket.arrives_at = time.monotonic() + 0.1
        start = time.monotonic()
        reply = asyncio.run(WakefulChannel(socket, session).get_msg(timeout=30))
        assert reply["msg_type"] == "execute_reply"
        assert time.monotonic() - start < 0.1 + 4 * POLL_SLICE_S

        socket.arrives_at = float("inf")  # nothing comes: the timeout still holds
        start = time.monotonic()
        with pytest.raises(Empty):
            asyncio.run(WakefulChannel(socket, session).get_msg(timeout=1))
        assert 1 <= time.monotonic() - start < 1 + 4 * POLL_SLICE_S
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
print(manager.provisioner.pid, warm.scratch, flush=True)
time.sleep(600)
"""


def test_a_forked_kernel_ends_when_its_grader_is_killed(tmp_path: Path) -> None:
    """As jupyter's own kernels do (JPY_PARENT_PID), though the template imported ipykernel before it was set."""
    become_subreaper()  # the orphaned kernel comes to this process, as it would to a grader's parent
    grader = subprocess.Popen([sys.executable, "-c", GRADER], stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    pid, scratch = grader.stdout.readline().split()
    kernel = int(pid)
    time.sleep(2)  # the kernel has started its parent poller
    grader.kill()
    grader.wait()
    deadline = time.monotonic() + 15
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
    assert ended, "the kernel outlived its grader"
