"""A fault costs the cell it happens in, and every lost point says why (autograder.guard, autograder.grading).

One tiny assignment, graded once by real nbgrader autograde, holds one test cell per fault:
a long assertion message, a runaway loop, a kernel that dies, a kernel that ignores the
interrupt, a rank that raises, a function that destroys the process group, a rank that
starts a process in a new session, and code that writes to stderr and warns. Each fault's
cell scores 0 with a one-line reason; the cell after it keeps its points.
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder import budget, guard
from autograder.__main__ import format_table
from autograder.course import release_notebook, source_notebook
from autograder.grading import GradingError, grade_notebook, scratch_course
from autograder.guard import GuardedExecute
from autograder.warm_kernels import WarmKernelManager
from tiny_course import assignment_notebook, nbgrader_cell, with_hidden, write_assignment

NAME = "00_faults"
LIMIT_S = 4  # every cell's time limit in this test (see the budget patch below)
IMPORTS = ("import os, signal, subprocess, sys, time, warnings\nimport torch.distributed as dist\n"
           "from helpers.runtime.cluster import run")
SOLUTION = '''def add(a, b):
    ### BEGIN SOLUTION
    return a + b
    ### END SOLUTION'''
SLEEPER = ["sleep", "613"]  # what the ranks start in new sessions: in the sandbox, so found by command line
# Each fault is the student's code (test cells run in the grader, autograder.verdicts): a second
# answer cell defines one function per fault, and each test cell calls one of them.
FAULTS = '''def spin():
    while True:
        pass

def die():
    os._exit(1)

def deaf():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        pass

def on_rank():
    if dist.get_rank() == 1:
        raise ValueError('rank one has no shard: ' + str([1, 2]))

def rank_raises():
    run(on_rank, world_size=2, timeout=30)

def destroys():
    def on_rank():
        dist.barrier()
        dist.destroy_process_group()
    run(on_rank, world_size=2, timeout=30)

def ranks():
    return run(lambda: dist.get_rank(), world_size=2, timeout=30)

def new_session():
    return run(lambda: subprocess.Popen(%r, start_new_session=True).pid, world_size=2, timeout=30)

def noisy():
    print('note', file=sys.stderr)
    warnings.warn('careful')
''' % SLEEPER
CELLS = [  # (grade_id, code before the hidden block, hidden block)
    ("test_message", "", "assert add(2, 2) == 5, 'add(2, 2) must be 5: ' + 'x' * 400 + ' END'"),
    ("test_runaway", "", "spin()"),
    ("test_after_runaway", "assert add(1, 1) == 2", ""),
    ("test_kernel_dies", "", "die()"),
    ("test_after_death", "assert add(2, 3) == 5", ""),
    ("test_deaf_kernel", "", "deaf()"),
    ("test_after_deaf", "assert add(3, 3) == 6", ""),
    ("test_rank_raises", "", "rank_raises()"),
    ("test_destroys_group", "", "destroys()"),
    ("test_after_destroy", "assert ranks() == [0, 1]", ""),
    ("test_new_session", "", "new_session()"),
    ("test_stderr", "noisy()\nassert add(1, 2) == 3", ""),
]
LOSES = {"test_message", "test_runaway", "test_kernel_dies", "test_deaf_kernel", "test_rank_raises",
         "test_destroys_group"}


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    cells = [new_markdown_cell("# Faults\nImplement `add`."), nbgrader_cell(IMPORTS, "imports"),
             nbgrader_cell(SOLUTION, "add", solution=True), nbgrader_cell(FAULTS, "faults", solution=True)]
    cells += [nbgrader_cell(with_hidden(v, h), gid, points=1) for gid, v, h in CELLS]
    return write_assignment(tmp_path_factory.mktemp("faults"), NAME, assignment_notebook(cells))


def _sleepers() -> set[int]:
    """Host pids of the processes the ranks start in new sessions."""
    return {p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == SLEEPER}


class Watcher(threading.Thread):
    """Notes every pid of :func:`_sleepers` while grading runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.seen: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            self.seen |= _sleepers()


@pytest.fixture(scope="module")
def graded(course):
    """(result, feedback HTML, pids the ranks started in new sessions) of one grading."""
    patch = pytest.MonkeyPatch()
    for name in ("MIN_S", "STARTUP_S"):  # only the two runaway cells are "measured": limit LIMIT_S
        patch.setattr(budget, name, LIMIT_S)
    # How long an interrupted kernel may take to answer: the deaf kernel waits all of it, the runaway cell
    # (no ranks to end) answers at once. The grader's 20 s is for cells ending ranks on a loaded machine.
    patch.setattr(guard, "INTERRUPT_REPLY_S", 2 * LIMIT_S)
    patch.setattr(budget, "measured_seconds", lambda: {NAME: {"test_runaway": 0.0, "test_deaf_kernel": 0.0}})
    source = nbformat.read(str(source_notebook(NAME, course)), as_version=4)
    watcher = Watcher()
    watcher.start()
    try:
        with scratch_course(NAME, course) as scratch:
            result = scratch.grade(source, "student")
            html = scratch.feedback("student")
    finally:
        watcher.done.set()
        watcher.join()
        patch.undo()
    return result, html, sorted(watcher.seen)


def _cells(result):
    return {c.grade_id: c for c in result.cells}


def test_each_fault_costs_only_its_own_cell(graded):
    result, _, _ = graded
    assert {gid for gid, c in _cells(result).items() if c.score < c.max_score} == LOSES
    assert result.score == len(CELLS) - len(LOSES)


def test_whole_assertion_message_without_hidden_source(graded):
    result, html, _ = graded
    message = _cells(result)["test_message"].message
    assert message == "AssertionError: add(2, 2) must be 5: " + "x" * 400 + " END"
    assert result.to_json()["cells"][0]["message"] == message
    table = format_table(result)
    assert message in table and "'x' * 400" not in table
    assert "x" * 400 + " END" in html and "&#x27;x&#x27; * 400" not in html and "'x' * 400" not in html


def test_runaway_cell_reports_its_time_limit(graded):
    # The message is the outcome: only the grader's time limit writes it, and it names the limit
    # the cell ran into (how long the grading took is the benchmarks' business, not a test's).
    result, _, _ = graded
    cell = _cells(result)["test_runaway"]
    assert cell.message == f"TimeLimitExceeded: this cell exceeded its time limit of {LIMIT_S} s"
    assert "KeyboardInterrupt" not in cell.message


def test_dead_and_deaf_kernels_cost_one_cell(graded):
    cells = _cells(graded[0])
    assert cells["test_kernel_dies"].message.startswith("KernelFault: the kernel died in this cell")
    assert cells["test_deaf_kernel"].message.startswith("KernelFault: the kernel did not respond in this cell")
    assert all(cells[gid].score == 1 for gid in ("test_after_death", "test_after_deaf"))


def test_rank_error_names_the_exception(graded):
    message = _cells(graded[0])["test_rank_raises"].message
    assert message.startswith("RankError: rank 1 raised ValueError: rank one has no shard: [1, 2]")
    assert "in your code: File" in message


def test_destroying_the_group_costs_that_cell_only(graded):
    cells = _cells(graded[0])
    assert "destroyed the process group" in cells["test_destroys_group"].message
    assert cells["test_after_destroy"].score == 1


def test_processes_started_in_a_new_session_end_with_grading(graded):
    assert len(graded[2]) == 2
    deadline = time.monotonic() + 60  # the grading has ended them; the wait only turns a hang into a failure
    while _sleepers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _sleepers()


def test_stderr_and_warnings_do_not_cost_points(graded):
    assert _cells(graded[0])["test_stderr"].score == 1


def _release(course):
    return nbformat.read(str(release_notebook(NAME, course)), as_version=4)


def _meta(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id).metadata.nbgrader


def test_metadata_is_repaired_with_one_line_notes(course):
    from autograder.grading import repair_metadata

    nb = _release(course)
    _meta(nb, "add")["grade_id"] = "my_add"  # renamed answer cell
    _meta(nb, "test_stderr").update(solution=True)  # a test cell marked as a solution
    nb.cells.append(nbgrader_cell("x = 1", "extra", points=5))  # an extra graded cell
    repaired, notes = repair_metadata(nb, _release(course))
    assert notes == ["cell 'my_add' had its grade_id renamed; it was graded as 'add'",
                     "cell 'test_stderr' had its nbgrader metadata changed (now a answer cell); "
                     "it was graded as the test cell it is",
                     "cell 'extra' is not part of the assignment; it ran as an ordinary cell"]
    assert _meta(repaired, "add") == _meta(_release(course), "add")
    assert _meta(repaired, "test_stderr") == _meta(_release(course), "test_stderr")
    assert "nbgrader" not in repaired.cells[-1].metadata


def test_another_assignments_notebook_is_refused_in_one_line(course, tmp_path):
    other = tmp_path / f"{NAME}.ipynb"
    nb = _release(course)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") not in (None, "imports"):
            cell.metadata.nbgrader["grade_id"] = "06_" + cell.metadata.nbgrader["grade_id"]
    nbformat.write(nb, str(other))
    lesson = course / "source" / "06_other" / "06_other.ipynb"
    lesson.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(lesson))
    try:
        with pytest.raises(GradingError, match=r"^this looks like assignment 06_other, not 00_faults"):
            grade_notebook(other, NAME, course)
    finally:
        lesson.unlink()
        lesson.parent.rmdir()


class FirstKernelDeaf(WarmKernelManager):
    """Its first kernel is a process that never speaks jupyter's protocol; later ones are real."""

    started = 0

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        FirstKernelDeaf.started += 1
        if FirstKernelDeaf.started == 1:
            kernel_cmd = [sys.executable, "-c", "import time; time.sleep(600)"]
        await super()._async_launch_kernel(kernel_cmd, **kw)


def test_a_kernel_that_never_answers_is_replaced_before_grading(tmp_path):
    nb = new_notebook(cells=[new_code_cell("print('graded')")])
    GuardedExecute(kernel_manager_class=FirstKernelDeaf, startup_timeout=3, shutdown_kernel="immediate") \
        .preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    assert FirstKernelDeaf.started == 2
    assert nb.cells[0].outputs[0].text == "graded\n"
