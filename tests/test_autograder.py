"""Tests of the autograder's API and command line on a tiny throwaway assignment.

They build their own course directory in ``tmp_path`` so they do not depend on the real
course content, and never write into the repository.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_markdown_cell

from autograder.__main__ import main
from autograder.check import Task, caught, design_tasks, mutant_tasks, run_check
from autograder.course import CourseError, release_notebook, source_notebook
from autograder.grading import CellGrade, GradeResult, GradingError, grade_notebook, scratch_course
from autograder.mutation import MutantError, parse_mutant, replace_cell, splice
from autograder.patches import make_patch
from autograder.processes import is_subreaper
from autograder.release import release
from tiny_course import assignment_notebook, nbgrader_cell, write_assignment

NAME = "00_tiny"
SOLUTION = "def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"
VISIBLE = "assert add(1, 2) == 3"
HIDDEN = ("assert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\nassert add(2.5, 0.25) == 2.75\n"
          "assert add('a', 'b') == 'ab'\n### END HIDDEN TESTS")
UNMARKED = "def add(a, b):\n    return a + b"  # SOLUTION as mutants' patches see it
MUTANT = ("# assignment: 00_tiny\n# grade_id: add\n# catches: truncates floats to int\n"
          + make_patch(UNMARKED, "def add(a, b):\n    return int(a) + int(b)") + "\n")
DESIGN = ("# assignment: 00_tiny\n# grade_id: add\n# design: the operator module instead of +\n"
          "import operator\n\ndef add(a, b):\n    return operator.add(a, b)\n")


def tiny_notebook():
    """The instructor version of the tiny assignment: one solution cell, two test cells."""
    return assignment_notebook([
        new_markdown_cell("# Tiny\nImplement `add`."),
        nbgrader_cell(SOLUTION, "add", solution=True),
        nbgrader_cell(VISIBLE, "test_add_visible", points=1),
        nbgrader_cell(HIDDEN, "test_add_hidden", points=2),
    ])


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course root holding the tiny assignment, its release, one mutant and one other correct design."""
    root = tmp_path_factory.mktemp("course")
    path = source_notebook(NAME, root)
    path.parent.mkdir(parents=True)
    nbformat.write(tiny_notebook(), str(path))
    release([NAME], root)
    mutant = root / "autograder" / "mutants" / NAME / "truncates.py"
    mutant.parent.mkdir(parents=True)
    mutant.write_text(MUTANT)
    design = root / "autograder" / "designs" / NAME / "operator_add.py"
    design.parent.mkdir(parents=True)
    design.write_text(DESIGN)
    return root


def cli(*args: str, root: Path) -> subprocess.CompletedProcess:
    """Run ``python -m autograder --root ROOT ARGS`` in a subprocess, capturing its output."""
    return subprocess.run([sys.executable, "-m", "autograder", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=300)


def run_main(capfd, *args: str, root: Path) -> tuple[int, str, str]:
    """Run the command line in this process: (exit status, stdout, stderr)."""
    status = main(["--root", str(root), *args])
    out, err = capfd.readouterr()
    return status, out, err


def write(nb, path: Path) -> Path:
    """Write ``nb`` to ``path`` and return the path."""
    nbformat.write(nb, str(path))
    return path


def cell_with_id(nb, grade_id: str):
    """The cell of ``nb`` whose nbgrader grade_id is ``grade_id``."""
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def test_release_is_student_version_and_in_sync(course):
    nb = nbformat.read(str(release_notebook(NAME, course)), as_version=4)
    text = json.dumps(nb)
    assert "BEGIN SOLUTION" not in text and "HIDDEN" not in text and "2.75" not in text
    assert "raise NotImplementedError()" in cell_with_id(nb, "add").source
    assert all(c.get("outputs", []) == [] for c in nb.cells)
    assert release([NAME], course, check=True) == []


def test_release_check_names_out_of_date_notebook(course, tmp_path, capfd):
    root = tmp_path / "copy"
    for part in ("source", "release"):
        shutil.copytree(course / part, root / part)
    stale = nbformat.read(str(release_notebook(NAME, root)), as_version=4)
    cell_with_id(stale, "test_add_visible").source = "assert True"
    write(stale, release_notebook(NAME, root))
    status, _, err = run_main(capfd, "release", "--check", root=root)
    assert status == 1
    assert f"{NAME}: {NAME}.ipynb" in err


def test_check_source_release_mutant_and_determinism(course):
    rows = {row.what: row for row in run_check([NAME], course, budget=600)}
    assert all(row.ok for row in rows.values()), rows
    assert rows["source"].score == "3/3"
    assert rows["release"].score == "0/3"
    assert rows["mutant truncates"].score == "1/3"
    assert "truncates floats to int" in rows["mutant truncates"].detail
    assert "test_add_hidden" in rows["mutant truncates"].detail
    assert rows["design operator_add"].score == "3/3"
    assert rows["source again (deterministic)"].ok
    assert rows["feedback hides hidden tests"].ok


def test_check_reports_a_design_that_loses_points(course, tmp_path, monkeypatch):
    wrong = tmp_path / NAME / "floats.py"
    wrong.parent.mkdir()
    wrong.write_text(f"# assignment: {NAME}\n# grade_id: add\n# design: floats only\n"
                     "def add(a, b):\n    return float(a) + float(b)\n")
    monkeypatch.setattr("autograder.check.design_files", lambda assignment, root: [wrong])
    source = nbformat.read(str(source_notebook(NAME, course)), as_version=4)
    [task] = list(design_tasks(NAME, source, course))
    assert "float(a)" in cell_with_id(task.notebook, "add").source
    cells = [CellGrade("test_add_visible", 1.0, 1.0), CellGrade("test_add_hidden", 0.0, 2.0)]
    ok, detail = task.verdict(GradeResult(NAME, 1.0, 3.0, cells))
    assert not ok and "test_add_hidden" in detail


def test_check_reports_a_surviving_mutant(course, tmp_path, monkeypatch):
    survivor = tmp_path / NAME / "same.py"
    survivor.parent.mkdir()
    survivor.write_text(f"# assignment: {NAME}\n# grade_id: add\n# catches: nothing\n"
                        + make_patch(UNMARKED, "def add(a, b):\n    return b + a") + "\n")

    monkeypatch.setattr("autograder.check.mutant_files", lambda assignment, root: [survivor])
    source = nbformat.read(str(source_notebook(NAME, course)), as_version=4)
    [task] = list(mutant_tasks(NAME, source, course))
    assert isinstance(task, Task) and "return b + a" in cell_with_id(task.notebook, "add").source
    ok, detail = task.verdict(GradeResult(NAME, 3.0, 3.0, []))  # the survivor gets every point
    assert not ok and "NOT caught: nothing" in detail


def test_grade_json_shape(course):
    """A real subprocess: stdout must hold exactly the JSON object, nothing else."""
    proc = cli("grade", str(source_notebook(NAME, course)), "--json", root=course)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert all(cell.pop("seconds") >= 0 for cell in result["cells"])  # wall time: varies
    assert result == {
        "assignment": NAME, "score": 3.0, "max_score": 3.0,
        "cells": [{"grade_id": "test_add_visible", "score": 1.0, "max_score": 1.0, "message": ""},
                  {"grade_id": "test_add_hidden", "score": 2.0, "max_score": 2.0, "message": ""}],
        "notes": [],
    }


def test_tampered_and_deleted_tests_are_graded_with_originals(course, tmp_path):
    nb = nbformat.read(str(release_notebook(NAME, course)), as_version=4)
    cell_with_id(nb, "add").source = "def add(a, b):\n    return int(a) + int(b)"
    cell_with_id(nb, "test_add_visible").source = "pass"
    nb.cells.remove(cell_with_id(nb, "test_add_hidden"))
    result = grade_notebook(write(nb, tmp_path / f"{NAME}.ipynb"), root=course)
    assert [(c.grade_id, c.score) for c in result.cells] == [("test_add_visible", 1.0),
                                                            ("test_add_hidden", 0.0)]
    assert result.score == 1.0 and result.max_score == 3.0
    assert any("'test_add_visible' was modified" in note for note in result.notes)
    assert any("'test_add_hidden' was deleted" in note for note in result.notes)


def test_duplicate_grade_id_is_refused(course, tmp_path, capfd):
    nb = nbformat.read(str(release_notebook(NAME, course)), as_version=4)
    copy = nbformat.from_dict(cell_with_id(nb, "add"))
    copy.id = "copied"
    nb.cells.append(copy)
    status, out, err = run_main(capfd, "grade", str(write(nb, tmp_path / "mine.ipynb")),
                                "--assignment", NAME, root=course)
    assert (status, out) == (2, "")
    assert "duplicate grade_id 'add'" in err
    assert len(err.strip().splitlines()) == 1


def test_changed_cell_type_is_refused(course, tmp_path):
    nb = nbformat.read(str(release_notebook(NAME, course)), as_version=4)
    cell = cell_with_id(nb, "add")
    nb.cells[nb.cells.index(cell)] = new_markdown_cell(cell.source, metadata=cell.metadata)
    with pytest.raises(GradingError, match="'add' was changed from a code cell to a markdown cell"):
        grade_notebook(write(nb, tmp_path / f"{NAME}.ipynb"), root=course)


@pytest.mark.parametrize("content", ["not json at all", '{"cells": 3}'])
def test_not_a_notebook_is_refused(course, tmp_path, capfd, content):
    path = tmp_path / f"{NAME}.ipynb"
    path.write_text(content)
    status, _, err = run_main(capfd, "grade", str(path), root=course)
    assert status == 2
    assert "not a valid Jupyter notebook" in err


def test_unknown_assignment_is_refused(course, tmp_path, capfd):
    path = write(tiny_notebook(), tmp_path / "99_nothing.ipynb")
    status, _, err = run_main(capfd, "grade", str(path), root=course)
    assert status == 2
    assert "unknown assignment '99_nothing'" in err
    with pytest.raises(CourseError, match="unknown assignment"):
        grade_notebook(path, assignment="nope", root=course)


def test_mutant_splices_whole_solution_cell(course):
    mutant = parse_mutant(course / "autograder" / "mutants" / NAME / "truncates.py")
    assert (mutant.assignment, mutant.grade_id, mutant.catches) == (NAME, "add", "truncates floats to int")
    source = nbformat.read(str(source_notebook(NAME, course)), as_version=4)
    spliced = splice(source, mutant)
    assert cell_with_id(spliced, "add").source == "def add(a, b):\n    return int(a) + int(b)"
    assert cell_with_id(source, "add").source == SOLUTION


@pytest.mark.parametrize("text, problem", [
    ("def add(a, b):\n    return 0\n", "header is missing assignment, grade_id, catches"),
    (f"# assignment: {NAME}\n# grade_id: add\n# catches: x\n", "no patch after the header"),
    ("# assignment: other\n# grade_id: add\n# catches: x\npass\n", "lives in"),
])
def test_malformed_mutant_is_reported(tmp_path, text, problem):
    path = tmp_path / NAME / "bad.py"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(MutantError, match=problem):
        parse_mutant(path)


@pytest.mark.parametrize("grade_id, problem", [("test_add_visible", "not a solution cell"),
                                               ("missing", "no cell with grade_id 'missing'")])
def test_splice_needs_an_existing_solution_cell(tmp_path, grade_id, problem):
    path = tmp_path / NAME / "m.py"
    path.parent.mkdir()
    path.write_text(f"# assignment: {NAME}\n# grade_id: {grade_id}\n# catches: x\n{make_patch('x', 'pass')}\n")
    with pytest.raises(MutantError, match=problem):
        splice(tiny_notebook(), parse_mutant(path))


TWO_EXERCISES = "00_two"


def _printed(nb, grade_id: str) -> str:
    return "".join(o.get("text", "") for o in cell_with_id(nb, grade_id).get("outputs", []))


def test_a_mutants_short_grading_runs_from_its_cell_to_the_first_loss(tmp_path):
    """GuardedExecute.mutant_of: earlier tests and everything after the first lost cell are not run."""
    root = write_assignment(tmp_path, TWO_EXERCISES, assignment_notebook([
        nbgrader_cell(SOLUTION, "add", solution=True),
        nbgrader_cell("print('ran add')\nassert add(1, 2) == 3", "test_add", points=1),
        nbgrader_cell("def mul(a, b):\n    ### BEGIN SOLUTION\n    return a * b\n    ### END SOLUTION",
                      "mul", solution=True),
        nbgrader_cell("print('ran mul')\nassert mul(2, 3) == 6", "test_mul", points=1),
        nbgrader_cell("print('ran mul again')\nassert mul(3, 3) == 9", "test_mul_again", points=1),
    ]))
    source = nbformat.read(str(source_notebook(TWO_EXERCISES, root)), as_version=4)
    mutant = replace_cell(source, "mul", "def mul(a, b):\n    return a + b", tmp_path / "sum.py")
    was_subreaper = is_subreaper()
    with scratch_course(TWO_EXERCISES, root) as scratch:
        short = scratch.grade(mutant, "short", mutant_of="mul")
        assert is_subreaper() == was_subreaper, "grading in this process left it a child subreaper"
        graded = nbformat.read(str(scratch.workdir / "autograded" / "short" / TWO_EXERCISES
                                   / f"{TWO_EXERCISES}.ipynb"), as_version=4)
        whole = scratch.grade(mutant, "whole")
    assert [(c.grade_id, c.score) for c in short.cells] == [("test_add", 1), ("test_mul", 0), ("test_mul_again", 1)]
    assert _printed(graded, "test_add") == "" and _printed(graded, "test_mul_again") == ""  # not run
    assert _printed(graded, "test_mul") == "ran mul\n"
    assert [(c.grade_id, c.score) for c in whole.cells] == [("test_add", 1), ("test_mul", 0), ("test_mul_again", 0)]


def test_a_mutant_naming_its_test_must_lose_points_there_first(tmp_path):
    result = GradeResult(NAME, 2.0, 3.0, [CellGrade("test_add_visible", 0, 1), CellGrade("test_add_hidden", 2, 2)])
    assert caught("x", result, caught_by="test_add_visible")[0]
    ok, detail = caught("x", result, caught_by="test_add_hidden")
    assert not ok and "caught by test_add_visible, not first by test_add_hidden" in detail
    path = tmp_path / NAME / "named.py"
    path.parent.mkdir()
    path.write_text(MUTANT.replace("# catches", "# caught_by: test_add_hidden\n# catches"))
    assert parse_mutant(path).caught_by == "test_add_hidden"


def test_grading_may_send_the_kernel_only_what_a_lesson_declares_kernel_side():
    from autograder import verdicts
    from autograder.check import kernel_side_row
    from autograder.lessons import l03

    verdicts.SHIPPED.clear()
    verdicts.shipped_request("run", l03.train_on_rank, (l03.CountedWaits,), {})
    assert verdicts.SHIPPED == {"autograder.lessons.l03.drivers.train_on_rank",
                                "autograder.lessons.l03.drivers.CountedWaits"}
    assert kernel_side_row("03", verdicts.SHIPPED).ok
    verdicts.shipped_request("call", l03.communication_schedule, (), {})  # a reference: never for the kernel
    row = kernel_side_row("03", verdicts.SHIPPED)
    assert not row.ok and "autograder.lessons.l03.verdicts.communication_schedule" in row.detail
    verdicts.SHIPPED.clear()
