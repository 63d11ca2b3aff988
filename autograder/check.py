"""The course-wide check: every assignment's grading does what the course promises.

For each assignment: the source scores full marks; the committed release scores 0 and
grading completes; its feedback shows no hidden-test line; notebooks whose solution cells
delegate to the student-side helpers score 0; every mutant loses points; every design (a
different correct solution of a design exercise) earns full marks; grading the source
twice gives identical per-cell scores; and everything fits in a wall-time budget.

Grading the source also records what of the ``autograder`` package it sent into the kernel:
only what each lesson's ``drivers`` module declares in ``KERNEL_SIDE`` (drivers, stand-ins, hidden models),
never a reference or an expected value.

A mutant's grading is a short one: it runs the test cells from the replaced solution cell on,
and stops at the first graded cell that loses points (``GuardedExecute.mutant_of``), so its
row names that cell and its score is that of the cells run, not the notebook's. A design's
grading is short in the same way: the cells before its own are the source's, which earned full
marks in the source grading.
"""
from __future__ import annotations

import html
import multiprocessing
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from multiprocessing.util import Finalize
from typing import Callable, Iterator, TextIO

from nbformat import NotebookNode

from . import verdicts
from .course import (CourseError, course_root, read_notebook, release_notebook, resolve_assignments,
                     source_notebook)
from .delegation import delegation_notebooks, leftover_notebook
from .feedback import hidden_lines
from .grading import GradeResult, ScratchCourse
from .mutation import design_files, mutant_files, parse_design, parse_mutant, splice


# Gradings at once, each in its own worker process. They wait on kernels and rank processes part
# of the time: on 2 cores (2026-12-03) 3 at once beat 2 and 4.
JOBS = 3
# Seconds of grading per assignment (the sum of its gradings' times). With JOBS at once beside
# pytest: 80-168 s each on a clean clone (2026-12-07, 2 cores, mutants graded up to their first
# lost cell); the budget leaves over 5x for a slower machine and catches a runaway one.
BUDGET_S = 900.0


@dataclass
class Row:
    """One line of the check's report."""

    assignment: str
    what: str
    ok: bool
    score: str = ""
    seconds: float | None = None
    detail: str = ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def score_text(result: GradeResult) -> str:
    """``score/max`` with trailing zeros dropped."""
    return f"{result.score:g}/{result.max_score:g}"


def lost_text(result: GradeResult) -> str:
    """Which cells lost points, with the first error line of each."""
    lost = [c for c in result.cells if c.score < c.max_score]
    return "; ".join(f"{c.grade_id}" + (f" ({c.message})" if c.message else "") for c in lost)


def attempt(assignment: str, what: str, grade: Callable[[], GradeResult],
            verdict: Callable[[GradeResult], tuple[bool, str]]) -> tuple[Row, GradeResult | None]:
    """Run one grading; any exception becomes a FAIL row instead of ending the check."""
    start = time.monotonic()
    try:
        result = grade()
    except Exception as exc:  # one broken grading must not stop the others
        return Row(assignment, what, False, seconds=time.monotonic() - start,
                   detail=f"grading failed: {first_line(exc)}"), None
    ok, detail = verdict(result)
    return Row(assignment, what, ok, score_text(result), result.seconds, detail), result


def full_marks(result: GradeResult) -> tuple[bool, str]:
    """Verdict for the source: every point earned."""
    return result.full_marks, "" if result.full_marks else f"lost: {lost_text(result)}"


def zero(result: GradeResult) -> tuple[bool, str]:
    """Verdict for the release: nothing earned."""
    earned = [c.grade_id for c in result.cells if c.score > 0]
    return not earned, f"earned points: {', '.join(earned)}" if earned else ""


def caught(catches: str, result: GradeResult, caught_by: str = "") -> tuple[bool, str]:
    """Verdict for a mutant: some points lost (its short grading stops at the first cell that loses them),
    first in the test cell ``caught_by`` when the mutant names one."""
    if result.full_marks:
        return False, f"NOT caught: {catches}"
    first = next(c.grade_id for c in result.cells if c.score < c.max_score)
    if caught_by and first != caught_by:
        return False, f"caught by {first}, not first by {caught_by}: {catches} | lost first: {lost_text(result)}"
    return True, f"catches: {catches} | lost first: {lost_text(result)}"


def same_scores(first: GradeResult | None, result: GradeResult) -> tuple[bool, str]:
    """Verdict for the second source grading: the same per-cell scores as the first."""
    if first is None:
        return False, "first source grading failed"
    before = [(c.grade_id, c.score) for c in first.cells]
    after = [(c.grade_id, c.score) for c in result.cells]
    return before == after, "" if before == after else f"first {before}, then {after}"


@dataclass
class Task:
    """One grading of the check: grade ``notebook`` as ``student``, then judge it with ``verdict``.

    ``verdict`` is None for the repeat grading of the source, which is judged against the
    first one; ``hidden_from`` is set when the grading's feedback must hide that source's
    hidden tests; ``mutant_of`` is the solution cell a mutant or design replaced (its grading stops at
    the first cell that loses points, see :attr:`autograder.guard.GuardedExecute.mutant_of`).
    """

    assignment: str
    what: str
    student: str
    notebook: NotebookNode
    verdict: Callable[[GradeResult], tuple[bool, str]] | None
    hidden_from: NotebookNode | None = None
    mutant_of: str = ""


def mutant_tasks(assignment: str, source: NotebookNode, root: Path) -> Iterator[Task | Row]:
    """One task per mutant file, or a FAIL row for a mutant that does not parse or splice."""
    paths = mutant_files(assignment, root)
    if not paths:
        yield Row(assignment, "mutants", True, detail="no mutants found")
    for path in paths:
        what = f"mutant {path.stem}"
        try:
            mutant = parse_mutant(path)
            spliced = splice(source, mutant)
        except CourseError as exc:
            yield Row(assignment, what, False, detail=str(exc))
            continue
        yield Task(assignment, what, f"mutant_{path.stem}", spliced,
                   partial(caught, mutant.catches, caught_by=mutant.caught_by), mutant_of=mutant.grade_id)


def design_tasks(assignment: str, source: NotebookNode, root: Path) -> Iterator[Task | Row]:
    """One task per design file (another correct solution: full marks), or a FAIL row if it does not splice."""
    for path in design_files(assignment, root):
        what = f"design {path.stem}"
        try:
            design = parse_design(path)
            spliced = splice(source, design)
        except CourseError as exc:
            yield Row(assignment, what, False, detail=str(exc))
            continue
        yield Task(assignment, what, f"design_{path.stem}", spliced, full_marks, mutant_of=design.grade_id)


def delegation_tasks(assignment: str, source: NotebookNode, release: NotebookNode) -> Iterator[Task | Row]:
    """One task per generated delegation notebook: solution cells bound to helpers callables score 0."""
    try:
        notebooks = delegation_notebooks(source, release)
    except Exception as exc:  # noqa: BLE001 - e.g. a helpers module that does not import
        yield Row(assignment, "delegation", False, detail=f"could not list helpers: {first_line(exc)}")
        return
    for k, (label, nb) in enumerate(notebooks):
        yield Task(assignment, f"delegation {k + 1}", f"delegation_{k + 1}", nb, partial(_zero_with, label))
    leftover = leftover_notebook(source, release)
    if leftover is not None:  # the names hidden blocks bind, called from the kernel
        yield Task(assignment, "delegation to ref", "delegation_ref", leftover[1], partial(_zero_with, leftover[0]))


def _zero_with(label: str, result: GradeResult) -> tuple[bool, str]:
    ok, detail = zero(result)
    return ok, f"{detail} | {label}".strip(" |")


def assignment_tasks(assignment: str, root: Path) -> list[Task | Row]:
    """Every grading the check makes for ``assignment``, in the order they should start."""
    try:
        source = read_notebook(source_notebook(assignment, root))
        release = read_notebook(release_notebook(assignment, root))
    except CourseError as exc:
        return [Row(assignment, "setup", False, detail=first_line(exc))]
    return [Task(assignment, "source", "source", source, full_marks),
            Task(assignment, "release", "release", release, zero, hidden_from=source),
            *delegation_tasks(assignment, source, release),
            *design_tasks(assignment, source, root),
            *mutant_tasks(assignment, source, root),
            Task(assignment, "source again (deterministic)", "source_again", source, None)]


def kernel_side_row(assignment: str, shipped: set[str]) -> Row:
    """Everything of the grader that grading sent into the kernel is declared kernel-side by its module."""
    undeclared = sorted(name for name in shipped if name.rpartition(".")[2] not in getattr(
        sys.modules.get(name.rpartition(".")[0]), "KERNEL_SIDE", ()))
    return Row(assignment, "kernel gets only kernel-side code", not undeclared,
               detail=f"sent, not in its module's KERNEL_SIDE: {', '.join(undeclared)}" if undeclared else
               f"{len(shipped)} declared object(s)")


def check_feedback(assignment: str, course: ScratchCourse, student: str, source) -> Row:
    """The feedback of a graded submission shows no line of the hidden tests."""
    try:
        text = html.unescape(course.feedback(student))
    except Exception as exc:  # noqa: BLE001 - report, go on
        return Row(assignment, "feedback hides hidden tests", False, detail=first_line(exc))
    shown = sorted(line for line in hidden_lines(source) if line in text)
    return Row(assignment, "feedback hides hidden tests", not shown,
               detail=f"feedback shows: {shown[0]}" if shown else "")


# The scratch courses of this process, one per assignment, made on first use: a check
# process grades tasks of every assignment and pays for generate_assignment once each.
_courses: dict[str, ScratchCourse] = {}


def _course(assignment: str, root: Path) -> ScratchCourse:
    if not _courses:
        Finalize(None, close_courses, exitpriority=10)  # also runs when a pool worker exits
    if assignment not in _courses:
        workdir = Path(tempfile.mkdtemp(prefix=f"autograder-{assignment}-"))
        try:
            _courses[assignment] = ScratchCourse(assignment, root, workdir)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
    return _courses[assignment]


def close_courses() -> None:
    """Delete this process's scratch courses."""
    while _courses:
        shutil.rmtree(_courses.popitem()[1].workdir, ignore_errors=True)


def _not_judged(result: GradeResult) -> tuple[bool, str]:
    return True, ""


def run_task(task: Task, root: Path) -> tuple[list[Row], GradeResult | None]:
    """Grade one task in this process's scratch course; its rows and the grade (None if it failed)."""
    try:
        course = _course(task.assignment, root)
    except Exception as exc:  # e.g. generate_assignment failed: report, go on with the next
        return [Row(task.assignment, task.what, False, detail=f"setup failed: {first_line(exc)}")], None
    verdicts.SHIPPED.clear()
    row, result = attempt(task.assignment, task.what,
                          partial(course.grade, task.notebook, task.student, task.mutant_of),
                          task.verdict or _not_judged)
    rows = [row]
    if task.what == "source" and result is not None:
        rows.append(kernel_side_row(task.assignment, set(verdicts.SHIPPED)))
    if task.hidden_from is not None and result is not None:
        rows.append(check_feedback(task.assignment, course, task.student, task.hidden_from))
    return rows, result


def start_order(per_assignment: list[list[Task | Row]]) -> list[Task | Row]:
    """All tasks, the assignments interleaved so that every core has work until the end."""
    queues = [list(tasks) for tasks in per_assignment]
    ordered = []
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def format_row(row: Row) -> str:
    """One report line: assignment, what, score, seconds, verdict, detail."""
    seconds = f"{row.seconds:7.1f}" if row.seconds is not None else " " * 7
    verdict = "OK" if row.ok else "FAIL"
    return f"{row.assignment:<28} {row.what:<40} {row.score:>9} {seconds}  {verdict:<4}  {row.detail}".rstrip()


class _Report:
    """Collects rows as gradings finish, judges repeat gradings, and adds the time-budget rows."""

    def __init__(self, names: list[str], budget: float, out: TextIO | None) -> None:
        self.names, self.budget, self.out = names, budget, out
        self.rows: list[Row] = []
        self.seconds = {name: 0.0 for name in names}
        self.first: dict[str, GradeResult | None] = {}
        self.again: dict[str, tuple[Row, GradeResult | None]] = {}

    def add(self, row: Row) -> None:
        self.rows.append(row)
        if row.seconds is not None:
            self.seconds[row.assignment] += row.seconds
        if self.out:
            print(format_row(row), file=self.out, flush=True)

    def graded(self, task: Task, rows: list[Row], result: GradeResult | None) -> None:
        if task.verdict is None:  # the repeat grading: judged once the first one is in
            self.again[task.assignment] = (rows[0], result)
        else:
            for row in rows:
                self.add(row)
            if task.what == "source":
                self.first[task.assignment] = result
        for name in [n for n in self.again if n in self.first]:
            row, result = self.again.pop(name)
            if result is not None:
                row.ok, row.detail = same_scores(self.first[name], result)
            self.add(row)

    def finish(self) -> list[Row]:
        for name in self.names:
            spent = self.seconds[name]
            self.add(Row(name, f"time budget {self.budget:g} s", spent <= self.budget, seconds=spent,
                         detail="sum of this assignment's gradings"))
        return self.rows


def run_check(assignments: list[str], root: Path | str | None = None, budget: float = BUDGET_S,
              out: TextIO | None = None, jobs: int = 1) -> list[Row]:
    """Check ``assignments`` (all when empty), printing rows to ``out`` as they finish.

    With ``jobs > 1`` that many gradings run at once, each worker process keeping one
    scratch course per assignment; the assignments' gradings are interleaved, so the cores
    stay busy until the last one. ``budget`` bounds the sum of each assignment's grading
    times (seconds).
    """
    root = course_root(root)
    names = resolve_assignments(assignments, root)
    if not names:
        raise CourseError(f"no assignments under {root / 'source'}")
    if out:
        print(f"{'assignment':<28} {'what':<40} {'score':>9} {'seconds':>7}  result", file=out, flush=True)
    report = _Report(names, budget, out)
    ordered = start_order([assignment_tasks(name, root) for name in names])
    for row in (item for item in ordered if isinstance(item, Row)):
        report.add(row)
    tasks = [item for item in ordered if isinstance(item, Task)]
    if jobs <= 1:
        try:
            for task in tasks:
                report.graded(task, *run_task(task, root))
        finally:
            close_courses()
        return report.finish()
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(run_task, task, root): task for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            try:
                rows, result = future.result()
            except Exception as exc:  # noqa: BLE001 - a worker that died: report, go on
                rows, result = [Row(task.assignment, task.what, False,
                                    detail=f"worker failed: {first_line(exc)}")], None
            report.graded(task, rows, result)
    return report.finish()
