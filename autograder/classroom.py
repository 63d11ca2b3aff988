"""Grade a whole class: every submission of one assignment, several at once, into the real gradebook.

    python -m autograder grade-class ASSIGNMENT [--from FOLDER] [--jobs N]

Each worker process keeps one ``NbGraderAPI`` of the course and calls nbgrader's own
``autograde`` for one student after another, so a grading pays neither nbgrader's start-up
nor a kernel template and forkserver of its own (one sandbox per worker,
:mod:`autograder.warm_kernels`). Results go
into the course's ``gradebook.db`` and ``autograded/`` exactly as ``nbgrader autograde``
writes them: ``nbgrader generate_feedback`` and ``nbgrader export`` work unchanged, and the
scores are those of a sequential ``nbgrader autograde`` (``benchmarks/class_grading.py``
compares both on one class). A submission nbgrader cannot grade is reported and the rest
are graded; a hanging one is stopped by the guarded grader's per-cell time limits.
"""
from __future__ import annotations

import multiprocessing
import re
import shutil
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.apps import NbGraderAPI

from .course import CourseError, course_root, make_api
from .quiet import captured_output

DB_BUSY_S = 120  # seconds a worker waits for another one's gradebook write (sqlite's lock)


@dataclass
class Graded:
    """The outcome of one student's grading."""

    student: str
    seconds: float
    score: float | None = None
    max_score: float | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def import_folder(folder: Path | str, assignment: str, root: Path | str | None = None) -> list[str]:
    """Copy every ``*.ipynb`` of ``folder`` into nbgrader's ``submitted/`` layout; the students' ids.

    A file's student id is its name without ``.ipynb`` and without the assignment's name
    (``alice.ipynb`` and ``alice_01_replicated_training.ipynb`` are both ``alice``), reduced
    to letters, digits, ``_`` and ``-``.
    """
    root = course_root(root)
    students = []
    for path in sorted(Path(folder).glob("*.ipynb")):
        student = re.sub(r"[^A-Za-z0-9_-]+", "_", path.stem.replace(assignment, "")).strip("_-") or path.stem
        if student in students:
            raise CourseError(f"{path.name}: a second notebook for student {student!r} in {folder}")
        target = root / "submitted" / student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
        students.append(student)
    return students


def submitted_students(assignment: str, root: Path | str | None = None) -> list[str]:
    """Students with a submission of ``assignment`` under ``submitted/``, sorted."""
    base = course_root(root) / "submitted"
    return sorted(p.parent.name for p in base.glob(f"*/{assignment}") if p.is_dir())


def _db_url(root: Path) -> str:
    return f"sqlite:///{root / 'gradebook.db'}?timeout={DB_BUSY_S}"


def _api(root: Path) -> NbGraderAPI:
    api = make_api(root)
    api.coursedir.db_url = _db_url(root)
    return api


_worker_api: NbGraderAPI | None = None


def _grade_one(root: Path, assignment: str, student: str) -> tuple[str, float, str]:
    """In a worker: nbgrader's autograde of one student; (student, seconds, error or "")."""
    global _worker_api
    start = time.monotonic()
    try:
        with captured_output():
            _worker_api = _worker_api or _api(root)
            result = _worker_api.autograde(assignment, student, force=True, create=True)
    except Exception as exc:  # noqa: BLE001 - one broken submission must not stop the class
        return student, time.monotonic() - start, f"{type(exc).__name__}: {exc}".splitlines()[0]
    error = "" if result.get("success") else _first_error(result)
    return student, time.monotonic() - start, error


EXCEPTION_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception)): (.*)$")
HINTS = {"KeyError: 'grade_id'": " (a graded cell's nbgrader metadata was changed or belongs to another "
                                 "assignment; `python -m autograder grade NOTEBOOK` repairs or names it)"}


def _first_error(result: dict) -> str:
    """nbgrader's reason for a failed autograde in one line: the last exception its log shows."""
    found = ""
    for line in (result.get("log") or "").splitlines() + (result.get("error") or "").splitlines():
        match = EXCEPTION_LINE.match(line)
        if match and not match.group(1).endswith("NbGraderException"):
            found = f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(3).strip()}"
    return (found + HINTS.get(found, ""))[:400] if found else "nbgrader could not grade this submission"


def gradebook_score(root: Path, assignment: str, student: str) -> tuple[float | None, float | None]:
    """(score, max_score) of ``student``'s graded submission in the gradebook; (None, None) if none."""
    with Gradebook(_db_url(root)) as gb:
        try:
            submission = gb.find_submission(assignment, student)
        except MissingEntry:
            return None, None
        return float(submission.score), float(submission.max_score)


def _progress_line(done: int, total: int, graded: Graded, slowest: Graded, failed: int) -> str:
    score = f"{graded.score:g}/{graded.max_score:g}" if graded.ok and graded.score is not None else "NOT GRADED"
    line = (f"[{done:>{len(str(total))}}/{total}] {graded.student:<24} {score:>10} {graded.seconds:6.1f} s"
            f"   slowest so far: {slowest.student} {slowest.seconds:.1f} s   failed: {failed}")
    return line + (f"\n    {graded.error}" if graded.error else "")


def grade_class(assignment: str, root: Path | str | None = None, jobs: int = 2,
                folder: Path | str | None = None, out: TextIO | None = None) -> list[Graded]:
    """Autograde every submission of ``assignment`` (imported from ``folder`` first, if given).

    ``jobs`` gradings run at once. One progress line per finished grading goes to ``out``.
    Returns one :class:`Graded` per student, in the order they finished.
    """
    root = course_root(root)
    with Gradebook(_db_url(root)) as gb:
        try:
            gb.find_assignment(assignment)
        except MissingEntry:
            raise CourseError(f"assignment {assignment!r} is not in {root / 'gradebook.db'}; run "
                              f"`nbgrader generate_assignment {assignment}` first") from None
    if folder is not None:
        import_folder(folder, assignment, root)
    students = submitted_students(assignment, root)
    if not students:
        raise CourseError(f"no submissions of {assignment} under {root / 'submitted'}")
    results: list[Graded] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
        futures = [pool.submit(_grade_one, root, assignment, student) for student in students]
        for future in as_completed(futures):
            student, seconds, error = future.result()
            graded = Graded(student, seconds, error=error)
            if graded.ok:
                graded.score, graded.max_score = gradebook_score(root, assignment, student)
            results.append(graded)
            if out:
                slowest = max(results, key=lambda g: g.seconds)
                failed = sum(not g.ok for g in results)
                print(_progress_line(len(results), len(students), graded, slowest, failed), file=out, flush=True)
    return results
