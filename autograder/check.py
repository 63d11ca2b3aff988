"""The course-wide check: every assignment's grading does what the course promises.

For each assignment: the source scores full marks; the committed release scores 0 and
grading completes; its feedback shows no hidden-test line; notebooks whose solution cells
delegate to the student-side helpers score 0; every mutant loses points; grading the source
twice gives identical per-cell scores; and everything fits in a wall-time budget.
"""
from __future__ import annotations

import html
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, TextIO

from .course import (CourseError, course_root, read_notebook, release_notebook, resolve_assignments,
                     source_notebook)
from .delegation import delegation_notebooks
from .feedback import hidden_lines
from .grading import GradeResult, ScratchCourse, scratch_course
from .mutation import mutant_files, parse_mutant, splice


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


def caught(catches: str, result: GradeResult) -> tuple[bool, str]:
    """Verdict for a mutant: some points lost."""
    if result.full_marks:
        return False, f"NOT caught: {catches}"
    return True, f"catches: {catches} | lost: {lost_text(result)}"


def same_scores(first: GradeResult | None, result: GradeResult) -> tuple[bool, str]:
    """Verdict for the second source grading: the same per-cell scores as the first."""
    if first is None:
        return False, "first source grading failed"
    before = [(c.grade_id, c.score) for c in first.cells]
    after = [(c.grade_id, c.score) for c in result.cells]
    return before == after, "" if before == after else f"first {before}, then {after}"


def check_mutants(assignment: str, course: ScratchCourse, root: Path) -> Iterator[Row]:
    """One row per mutant file: it must parse, splice and lose points."""
    paths = mutant_files(assignment, root)
    if not paths:
        yield Row(assignment, "mutants", True, detail="no mutants found")
        return
    source = read_notebook(source_notebook(assignment, root))
    for path in paths:
        what = f"mutant {path.stem}"
        try:
            mutant = parse_mutant(path)
            spliced = splice(source, mutant)
        except CourseError as exc:
            yield Row(assignment, what, False, detail=str(exc))
            continue
        yield attempt(assignment, what, partial(course.grade, spliced, f"mutant_{path.stem}"),
                      partial(caught, mutant.catches))[0]


def check_delegation(assignment: str, course: ScratchCourse, source) -> Iterator[Row]:
    """One row per generated delegation notebook: solution cells bound to helpers callables score 0."""
    try:
        notebooks = delegation_notebooks(source, course.release)
    except Exception as exc:  # noqa: BLE001 - e.g. a helpers module that does not import
        yield Row(assignment, "delegation", False, detail=f"could not list helpers: {first_line(exc)}")
        return
    for k, (label, nb) in enumerate(notebooks):
        yield attempt(assignment, f"delegation {k + 1}", partial(course.grade, nb, f"delegation_{k + 1}"),
                      lambda result, label=label: _zero_with(label, result))[0]


def _zero_with(label: str, result: GradeResult) -> tuple[bool, str]:
    ok, detail = zero(result)
    return ok, f"{detail} | {label}".strip(" |")


def check_feedback(assignment: str, course: ScratchCourse, student: str, source) -> Row:
    """The feedback of a graded submission shows no line of the hidden tests."""
    try:
        text = html.unescape(course.feedback(student))
    except Exception as exc:  # noqa: BLE001 - report, go on
        return Row(assignment, "feedback hides hidden tests", False, detail=first_line(exc))
    shown = sorted(line for line in hidden_lines(source) if line in text)
    return Row(assignment, "feedback hides hidden tests", not shown,
               detail=f"feedback shows: {shown[0]}" if shown else "")


def check_assignment(assignment: str, root: Path, budget: float) -> Iterator[Row]:
    """All check rows for one assignment, as each finishes; the time-budget row last."""
    start = time.monotonic()
    try:
        with scratch_course(assignment, root) as course:
            source = read_notebook(source_notebook(assignment, root))
            row, first = attempt(assignment, "source", partial(course.grade, source, "source"),
                                 full_marks)
            yield row
            release_path = release_notebook(assignment, root)
            yield attempt(assignment, "release",
                          lambda: course.grade(read_notebook(release_path), "release"), zero)[0]
            yield check_feedback(assignment, course, "release", source)
            yield from check_delegation(assignment, course, source)
            yield from check_mutants(assignment, course, root)
            yield attempt(assignment, "source again (deterministic)",
                          partial(course.grade, source, "source_again"), partial(same_scores, first))[0]
    except Exception as exc:  # e.g. generate_assignment failed: report, go on with the next
        yield Row(assignment, "setup", False, detail=first_line(exc))
    elapsed = time.monotonic() - start
    yield Row(assignment, f"time budget {budget:g} s", elapsed <= budget, seconds=elapsed)


def format_row(row: Row) -> str:
    """One report line: assignment, what, score, seconds, verdict, detail."""
    seconds = f"{row.seconds:7.1f}" if row.seconds is not None else " " * 7
    verdict = "OK" if row.ok else "FAIL"
    return f"{row.assignment:<28} {row.what:<40} {row.score:>9} {seconds}  {verdict:<4}  {row.detail}".rstrip()


def _check_one(name: str, root: Path, budget: float) -> list[Row]:
    return list(check_assignment(name, root, budget))


def run_check(assignments: list[str], root: Path | str | None = None, budget: float = 600.0,
              out: TextIO | None = None, jobs: int = 1) -> list[Row]:
    """Check ``assignments`` (all when empty), printing rows to ``out`` as they finish.

    With ``jobs > 1`` that many assignments are checked at once, each in its own
    process and scratch course; rows are printed one assignment at a time.
    """
    root = course_root(root)
    names = resolve_assignments(assignments, root)
    if not names:
        raise CourseError(f"no assignments under {root / 'source'}")
    header = f"{'assignment':<28} {'what':<40} {'score':>9} {'seconds':>7}  result"
    rows: list[Row] = []
    if out:
        print(header, file=out, flush=True)

    def report(row: Row) -> None:
        rows.append(row)
        if out:
            print(format_row(row), file=out, flush=True)

    if jobs <= 1 or len(names) == 1:
        for name in names:
            for row in check_assignment(name, root, budget):
                report(row)
        return rows
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for per_assignment in pool.map(_check_one, names, [root] * len(names), [budget] * len(names)):
            for row in per_assignment:
                report(row)
    return rows
