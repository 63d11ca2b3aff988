"""Grade a notebook with real nbgrader autograde in a throwaway course directory."""
from __future__ import annotations

import copy
import shutil
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import nbformat
from nbformat import NotebookNode
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from .course import (SOURCE, CourseError, check_api_result, course_root, list_assignments, make_api,
                     read_notebook, source_notebook)
from .feedback import hidden_lines, scrub
from .guard import CELL_SECONDS, GRADER_ERRORS
from .release import generate_release
from .sandbox import available as sandbox_available
from .warm_kernels import UNSANDBOXED


class GradingError(CourseError):
    """The submission cannot be graded as it is (its message says why, in one line)."""


@dataclass
class CellGrade:
    """The grade of one graded cell; ``message`` says why points were lost, if known.

    ``seconds`` is the cell's wall time in this grading (0 if it did not run).
    """

    grade_id: str
    score: float
    max_score: float
    message: str = ""
    seconds: float = 0.0


@dataclass
class GradeResult:
    """The outcome of grading one notebook."""

    assignment: str
    score: float
    max_score: float
    cells: list[CellGrade]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def full_marks(self) -> bool:
        """Whether every point was earned."""
        return self.max_score > 0 and self.score == self.max_score

    def to_json(self) -> dict:
        """The JSON document printed by ``grade --json``."""
        return {
            "assignment": self.assignment,
            "score": self.score,
            "max_score": self.max_score,
            "cells": [{"grade_id": c.grade_id, "score": c.score, "max_score": c.max_score,
                       "message": c.message, "seconds": round(c.seconds, 3)} for c in self.cells],
            "notes": list(self.notes),
        }


def nbgrader_meta(cell: NotebookNode) -> dict:
    """The cell's ``metadata.nbgrader`` (empty if absent)."""
    return cell.metadata.get("nbgrader", {})


def grade_id(cell: NotebookNode) -> str | None:
    """The grade_id of an nbgrader cell (graded, solution or locked), else None."""
    meta = nbgrader_meta(cell)
    if meta.get("grade") or meta.get("solution") or meta.get("locked"):
        return meta.get("grade_id")
    return None


def check_structure(submitted: NotebookNode, reference: NotebookNode) -> None:
    """Reject duplicate grade_ids, and nbgrader cells whose type differs from ``reference``."""
    seen: set[str] = set()
    for cell in submitted.cells:
        gid = grade_id(cell)
        if gid is None:
            continue
        if gid in seen:
            raise GradingError(f"duplicate grade_id {gid!r}: a graded cell appears more than once "
                               "(was a cell copied?); delete the copy and resubmit")
        seen.add(gid)
    expected = {grade_id(c): c.cell_type for c in reference.cells if grade_id(c)}
    for cell in submitted.cells:
        gid = grade_id(cell)
        if gid in expected and cell.cell_type != expected[gid]:
            raise GradingError(f"cell {gid!r} was changed from a {expected[gid]} cell to a "
                               f"{cell.cell_type} cell; change it back and resubmit")


GRADING_FLAGS = ("grade", "solution", "locked", "points", "grade_id")


def _kind(meta: dict) -> str:
    return "test" if meta.get("grade") and not meta.get("solution") else \
        "answer" if meta.get("solution") else "locked" if meta.get("locked") else "other"


def repair_metadata(submitted: NotebookNode, release: NotebookNode) -> tuple[NotebookNode, list[str]]:
    """Give nbgrader cells back the metadata of their release cells; one note per repair.

    A cell whose grade_id is unknown takes the id of the release cell expected at its place
    (the next one missing, if it is of the same kind and cell type), or, if none fits, loses
    its nbgrader metadata and runs as an ordinary cell. A known cell whose flags changed (a
    test cell marked as a solution, different points) gets the release's flags back.
    """
    nb = copy.deepcopy(submitted)
    expected = [c for c in release.cells if grade_id(c)]
    by_id = {grade_id(c): c for c in expected}
    present = {grade_id(c) for c in nb.cells if grade_id(c)}
    missing = [grade_id(c) for c in expected if grade_id(c) not in present]
    notes = []
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid is None:
            continue
        if gid not in by_id:
            fits = [m for m in missing if by_id[m].cell_type == cell.cell_type
                    and _kind(nbgrader_meta(by_id[m])) == _kind(nbgrader_meta(cell))][:1]
            if fits:
                missing.remove(fits[0])
                notes.append(f"cell {gid!r} had its grade_id renamed; it was graded as {fits[0]!r}")
                gid = fits[0]
            else:
                del cell.metadata["nbgrader"]
                notes.append(f"cell {gid!r} is not part of the assignment; it ran as an ordinary cell")
                continue
        reference = nbgrader_meta(by_id[gid])
        if gid != grade_id(cell) or any(nbgrader_meta(cell).get(k) != reference.get(k) for k in GRADING_FLAGS):
            if gid == grade_id(cell):
                notes.append(f"cell {gid!r} had its nbgrader metadata changed (now a {_kind(nbgrader_meta(cell))} "
                             f"cell); it was graded as the {_kind(reference)} cell it is")
            cell.metadata["nbgrader"] = copy.deepcopy(reference)
    return nb, notes


def looks_like(submitted: NotebookNode, assignment: str, root: Path | str | None) -> str | None:
    """The assignment ``submitted`` belongs to if it shares no graded cell with ``assignment`` but does with it."""
    ids = {grade_id(c) for c in submitted.cells} - {None, "imports"}
    if not ids:
        return None
    overlap = {name: len(ids & {grade_id(c) for c in read_notebook(source_notebook(name, root)).cells})
               for name in list_assignments(root)}
    if overlap.get(assignment):
        return None
    best = max(overlap, key=overlap.get, default=None)
    return best if best and overlap[best] else None


def restore_locked_cells(submitted: NotebookNode, release: NotebookNode,
                         source: NotebookNode) -> tuple[NotebookNode, list[str]]:
    """Put deleted locked cells back and note edited ones; nbgrader restores the contents.

    nbgrader's autograde overwrites every locked cell with its ``source`` version from the
    gradebook, but it does not reliably re-insert a deleted one. A deleted cell is
    re-inserted after the nearest earlier nbgrader cell still present. A locked cell is
    edited if it matches neither its release nor its source version.
    """
    originals = {grade_id(c): c.source for c in source.cells if grade_id(c)}
    nb = copy.deepcopy(submitted)
    notes = []
    present = {grade_id(c): c for c in nb.cells if grade_id(c)}
    previous: str | None = None
    for ref in release.cells:
        gid = grade_id(ref)
        if gid is None:
            continue
        kind = "test cell" if nbgrader_meta(ref).get("grade") else "locked cell"
        if gid not in present:
            if nbgrader_meta(ref).get("locked"):
                position = nb.cells.index(present[previous]) + 1 if previous else 0
                nb.cells.insert(position, copy.deepcopy(ref))
                present[gid] = nb.cells[position]
                notes.append(f"{kind} {gid!r} was deleted; it was put back and graded with the original")
            else:
                notes.append(f"answer cell {gid!r} is missing from the submission")
                continue
        elif (nbgrader_meta(ref).get("locked")
              and present[gid].source not in (ref.source, originals.get(gid))):
            notes.append(f"{kind} {gid!r} was modified; it was graded with the original")
        previous = gid
    return nb, notes


MAX_MESSAGE = 8000  # characters of one cell's message; a rank's traceback rarely needs more


def failure_message(cell: NotebookNode, secret: set[str]) -> str:
    """The whole error a graded cell produced (``name: message``), without lines quoting ``secret``.

    The grader's own verdicts (refusal, time limit, kernel fault) come first: they explain
    any error the cell showed before them. A cell that wrote to stderr (only possible
    outside the guarded grader) reports that.
    """
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    errors.sort(key=lambda o: o.ename not in GRADER_ERRORS)
    if errors:
        text = f"{errors[0].ename}: {errors[0].evalue}" if errors[0].evalue else errors[0].ename
        return scrub(text, secret).strip()[:MAX_MESSAGE]
    for output in cell.get("outputs", []):
        if output.output_type == "stream" and output.name == "stderr":
            return ("stderr: " + scrub(output.text, secret).strip())[:MAX_MESSAGE]
    return ""


def refusals(nb: NotebookNode) -> list[str]:
    """One note per student cell the guarded grader refused to run."""
    return [f"refused: {o.evalue.split('. The grader')[0]}" for c in nb.cells
            if not nbgrader_meta(c).get("grade") for o in c.get("outputs", [])
            if o.output_type == "error" and o.ename == "GradingRefused"]


class ScratchCourse:
    """A throwaway course directory holding one assignment registered in a fresh gradebook.

    Each :meth:`grade` call autogrades one submission as a new student, so grading many
    variants of an assignment pays for ``generate_assignment`` only once. Kernels run in
    ``sandbox`` mode (:data:`autograder.warm_kernels.MODES`; None: the course config's, "required").
    """

    def __init__(self, assignment: str, root: Path, workdir: Path, sandbox: str | None = None) -> None:
        self.assignment = assignment
        self.workdir = workdir
        self.sandbox = sandbox
        release_dir = generate_release(assignment, root, workdir)
        self.release = nbformat.read(release_dir / f"{assignment}.ipynb", as_version=4)
        self.source = nbformat.read(workdir / SOURCE / assignment / f"{assignment}.ipynb", as_version=4)
        self.api = make_api(workdir, sandbox)
        self.graded_ids = [nbgrader_meta(c)["grade_id"] for c in self.release.cells
                           if nbgrader_meta(c).get("grade")]

    def gradebook(self) -> Gradebook:
        """The scratch course's gradebook (close it after use)."""
        return Gradebook(self.api.coursedir.db_url, self.api.coursedir.course_id)

    def grade(self, submitted: NotebookNode, student: str, mutant_of: str = "") -> GradeResult:
        """Autograde ``submitted`` as ``student`` and return its scores.

        ``mutant_of`` (the course check's mutants and designs only): the grade_id of the solution cell
        a mutant or design replaced; the grading is the short one of :attr:`autograder.guard.GuardedExecute.mutant_of`,
        which shows whether, and where, points are first lost, not the notebook's score.
        """
        start = time.monotonic()
        check_structure(submitted, self.release)
        # nbgrader repairs the submission itself (autograder.repair); the notes say what it will do
        repaired, notes = repair_metadata(submitted, self.release)
        notes.extend(restore_locked_cells(repaired, self.release, self.source)[1])
        name = self.assignment
        target = self.workdir / "submitted" / student / name / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(submitted, str(target))
        with self.gradebook() as gb:
            gb.update_or_create_student(student)
        self.api.config.GuardedExecute.mutant_of = mutant_of
        with warnings.catch_warnings():  # nbgrader's own harmless SQLAlchemy session warnings
            warnings.simplefilter("ignore", SAWarning)
            result = self.api.autograde(name, student, force=True, create=True)
        check_api_result(result, f"autograde {name} for {student}")
        cells, score, max_score = self.read_grades(student, notes)
        if self.sandbox == "optional" and not sandbox_available():
            notes.append(UNSANDBOXED)
        return GradeResult(name, score, max_score, cells, notes, time.monotonic() - start)

    def feedback(self, student: str) -> str:
        """The feedback HTML nbgrader's ``generate_feedback`` writes for ``student`` (after :meth:`grade`)."""
        name = self.assignment
        check_api_result(self.api.generate_feedback(name, student, force=True),
                         f"generate_feedback {name} for {student}")
        return (self.workdir / "feedback" / student / name / f"{name}.html").read_text(encoding="utf-8")

    def read_grades(self, student: str, notes: list[str]) -> tuple[list[CellGrade], float, float]:
        """Per-cell grades in notebook order and the totals, from the gradebook.

        Cells left for manual grading are added to ``notes``.
        """
        name = self.assignment
        autograded = self.workdir / "autograded" / student / name / f"{name}.ipynb"
        executed = nbformat.read(autograded, as_version=4)
        secret = hidden_lines(self.source)
        messages = {nbgrader_meta(c).get("grade_id"): failure_message(c, secret) for c in executed.cells}
        notes.extend(refusals(executed))
        with self.gradebook() as gb:
            submission = gb.find_submission(name, student)
            score, max_score = float(submission.score), float(submission.max_score)
            grades = {g.name: g for g in gb.find_submission_notebook(name, name, student).grades}
            cells = []
            for gid in self.graded_ids:
                grade = grades[gid]
                if grade.needs_manual_grade:
                    notes.append(f"cell {gid!r} needs manual grading; it counts 0 here")
                got, out_of = float(grade.score or 0.0), float(grade.max_score)
                cells.append(CellGrade(gid, got, out_of, messages.get(gid, "") if got < out_of else "",
                                       CELL_SECONDS.get(gid, 0.0)))
        return cells, score, max_score


@contextmanager
def scratch_course(assignment: str, root: Path | str | None = None,
                   sandbox: str | None = None) -> Iterator[ScratchCourse]:
    """A :class:`ScratchCourse` for ``assignment`` (kernels in ``sandbox`` mode) that is deleted afterwards."""
    root = course_root(root)
    workdir = Path(tempfile.mkdtemp(prefix=f"autograder-{assignment}-"))
    try:
        yield ScratchCourse(assignment, root, workdir, sandbox)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def grade_notebook(path: Path | str, assignment: str | None = None,
                   root: Path | str | None = None, sandbox: str | None = None) -> GradeResult:
    """Grade the notebook at ``path`` against the course's hidden tests.

    The assignment is ``assignment`` if given, else the notebook's file name stem. Kernels
    run in ``sandbox`` mode (None: the course config's, "required"; self-study: "optional").
    Raises :class:`GradingError` (or :class:`CourseError`) when it cannot be graded.
    """
    path = Path(path)
    submitted = read_notebook(path)
    name = assignment or path.stem
    known = list_assignments(root)
    if name not in known:
        raise GradingError(f"unknown assignment {name!r} (known: {', '.join(known) or 'none'}); "
                           "name the notebook after its assignment or pass the assignment")
    other = looks_like(submitted, name, root)
    if other:
        raise GradingError(f"this looks like assignment {other}, not {name} (it has {other}'s graded cells "
                           f"and none of {name}'s); grade it as {other}")
    check_structure(submitted, read_notebook(source_notebook(name, root)))  # fail before nbgrader runs
    with scratch_course(name, root, sandbox) as course:
        return course.grade(submitted, "student")
