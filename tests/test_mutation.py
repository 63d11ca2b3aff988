"""Mutant files as patches of a source solution cell (autograder.mutation, autograder.patches).

Fast: nothing here grades; a throwaway course in ``tmp_path`` holds a one-cell source notebook.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest

from autograder.__main__ import main
from autograder.check import Row, mutant_tasks
from autograder.course import list_assignments, source_notebook
from autograder.mutation import MutantError, mutant_files, mutated_source, parse_mutant, splice
from autograder.patches import PatchError, apply_patch, make_patch, parse_patch
from tiny_course import assignment_notebook, nbgrader_cell

NAME = "00_tiny"
CELL = ("def mean(xs):\n    ### BEGIN SOLUTION\n    total = 0.0\n    for x in xs:\n        total += x\n"
        "    return total / len(xs)\n    ### END SOLUTION")
UNMARKED = "def mean(xs):\n    total = 0.0\n    for x in xs:\n        total += x\n    return total / len(xs)"
WRONG = UNMARKED.replace("/ len(xs)", "/ (len(xs) - 1)")
HEADER = f"# assignment: {NAME}\n# grade_id: mean\n# catches: divides by n - 1\n"


def write_source(root: Path, cell: str = CELL) -> None:
    """The source notebook of the tiny assignment: one solution cell ``mean`` and its test."""
    path = source_notebook(NAME, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(assignment_notebook([nbgrader_cell(cell, "mean", solution=True),
                                        nbgrader_cell("assert mean([1, 3]) == 2", "test_mean", points=1)]), str(path))


@pytest.fixture
def course(tmp_path) -> Path:
    write_source(tmp_path)
    return tmp_path


def mutant_path(root: Path, text: str, name: str = "n_minus_one") -> Path:
    path = root / "autograder" / "mutants" / NAME / f"{name}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def source_nb(root: Path):
    return nbformat.read(str(source_notebook(NAME, root)), as_version=4)


def cli(capfd, root: Path, *args: str) -> tuple[int, str, str]:
    status = main(["--root", str(root), "mutant", *args])
    out, err = capfd.readouterr()
    return status, out, err


# ---- autograder.patches ----

def test_a_patch_applies_to_the_text_it_was_made_from():
    patch = make_patch(UNMARKED, WRONG)
    assert apply_patch(UNMARKED, parse_patch(patch)) == WRONG


def test_a_patch_keeps_three_lines_of_context():
    old = "\n".join(f"line {k}" for k in range(20))
    patch = make_patch(old, old.replace("line 10", "LINE 10"))
    assert patch.splitlines()[2:] == ["@@ -8,7 +8,7 @@", " line 7", " line 8", " line 9", "-line 10", "+LINE 10",
                                      " line 11", " line 12", " line 13"]


def test_a_changed_context_line_is_refused_with_hunk_and_line():
    hunks = parse_patch(make_patch(UNMARKED, WRONG))
    with pytest.raises(PatchError, match=r"hunk 1 \(@@ -2,4 \+2,4 @@\), line 4 of the cell: "
                                         r"expected '        total \+= x', found '        total -= x'"):
        apply_patch(UNMARKED.replace("+= x", "-= x"), hunks)


def test_an_offset_patch_is_refused_not_moved():
    hunks = parse_patch(make_patch(UNMARKED, WRONG))
    with pytest.raises(PatchError, match="hunk 1"):
        apply_patch("# a new first line\n" + UNMARKED, hunks)


def test_a_cell_too_short_for_the_hunk_is_refused():
    hunks = parse_patch(make_patch(UNMARKED, WRONG))
    with pytest.raises(PatchError, match="where the cell ends"):
        apply_patch("def mean(xs):\n    total = 0.0", hunks)


def test_an_empty_context_line_stands_for_a_blank_line():
    old, new = "a\n\nb\nc", "a\n\nb\nC"
    stripped = make_patch(old, new).replace("\n \n", "\n\n")  # an editor removed the lone space
    assert apply_patch(old, parse_patch(stripped)) == new


@pytest.mark.parametrize("text, problem", [
    ("def f():\n    pass", "not a unified diff"),
    ("--- a\n+++ b\n@@ -1,2 +1,2 @@\n x\n-y", "cut short"),
    ("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n@@ -1 +1 @@\n-x\n+y", "starts inside or before hunk 1"),
    ("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\nnot a hunk", "expected an '@@ -a,b \\+c,d @@' hunk header"),
    ("--- a\n+++ b\n@@ -1,2 +1,2 @@\n-x\n*y\n+z", "starts with neither"),
])
def test_a_malformed_patch_is_refused(text, problem):
    with pytest.raises(PatchError, match=problem):
        parse_patch(text)


# ---- mutant files ----

def test_a_mutant_patch_applies_to_its_cell_without_solution_markers(course):
    path = mutant_path(course, HEADER + make_patch(UNMARKED, WRONG) + "\n")
    mutant = parse_mutant(path)
    assert (mutant.assignment, mutant.grade_id, mutant.catches) == (NAME, "mean", "divides by n - 1")
    spliced = splice(source_nb(course), mutant)
    assert spliced.cells[0].source == WRONG
    assert source_nb(course).cells[0].source == CELL


def test_a_changed_source_cell_fails_loudly_naming_file_hunk_line_and_fix(course):
    path = mutant_path(course, HEADER + make_patch(UNMARKED, WRONG) + "\n")
    write_source(course, CELL.replace("total = 0.0", "total = 0"))
    with pytest.raises(MutantError) as info:
        splice(source_nb(course), parse_mutant(path))
    message = str(info.value)
    assert message.startswith(f"{path}: patch no longer applies to solution cell 'mean' of "
                              f"source/{NAME}/{NAME}.ipynb: hunk 1 (@@ -2,4 +2,4 @@), line 3 of the cell: "
                              "expected '    total = 0.0', found '    total = 0'")
    assert "python -m autograder mutant expand" in message and "python -m autograder mutant diff" in message


def test_the_check_reports_a_stale_mutant_as_a_failed_row(course):
    mutant_path(course, HEADER + make_patch(UNMARKED, WRONG) + "\n")
    write_source(course, CELL.replace("for x in xs", "for x in list(xs)"))
    [row] = list(mutant_tasks(NAME, source_nb(course), course))
    assert isinstance(row, Row) and not row.ok
    assert "patch no longer applies" in row.detail and "hunk 1" in row.detail


def test_a_patch_that_changes_nothing_is_an_error(course):
    noop = "--- a\n+++ b\n@@ -1 +1 @@\n-def mean(xs):\n+def mean(xs):\n"
    path = mutant_path(course, HEADER + noop)
    with pytest.raises(MutantError, match="the patch changes nothing in solution cell 'mean'"):
        splice(source_nb(course), parse_mutant(path))


def test_a_whole_cell_mutant_is_told_to_become_a_patch(course):
    path = mutant_path(course, HEADER + WRONG + "\n")
    with pytest.raises(MutantError, match=r"no patch .* `python -m autograder mutant diff .*n_minus_one.py`"):
        parse_mutant(path)


@pytest.mark.parametrize("text, problem", [
    ("--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n", "header is missing assignment, grade_id, catches"),
    (HEADER + "# grade_id: again\n--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n", "header key 'grade_id' given twice"),
    (HEADER.replace(NAME, "other") + "--- a\n+++ b\n@@ -1 +1 @@\n-x\n+y\n", "lives in"),
    (HEADER, "no patch after the header"),
    (HEADER + "--- a\n+++ b\n@@ -1,3 +1,3 @@\n-x\n+y\n", "cut short"),
])
def test_header_and_patch_errors_name_the_file(course, text, problem):
    path = mutant_path(course, text)
    with pytest.raises(MutantError, match=problem) as info:
        parse_mutant(path)
    assert str(info.value).startswith(str(path))


# ---- python -m autograder mutant diff / show / expand ----

def test_diff_then_show_gives_back_the_whole_cell(course, capfd):
    path = mutant_path(course, HEADER + "\n" + WRONG + "\n")
    status, out, _ = cli(capfd, course, "diff", str(path))
    assert status == 0 and "now a patch of 'mean' (1 hunk(s))" in out
    assert path.read_text() == HEADER + make_patch(UNMARKED, WRONG, f"source/{NAME}/{NAME}.ipynb mean") + "\n"
    assert cli(capfd, course, "show", str(path)) == (0, WRONG + "\n", "")


def test_expand_then_diff_restores_the_patch(course, capfd):
    path = mutant_path(course, HEADER + WRONG + "\n")
    cli(capfd, course, "diff", str(path))
    patched = path.read_text()
    assert cli(capfd, course, "expand", str(path))[0] == 0
    assert path.read_text() == HEADER + WRONG + "\n"
    cli(capfd, course, "diff", str(path))
    assert path.read_text() == patched


def test_diff_refuses_the_source_cell_itself(course, capfd):
    path = mutant_path(course, HEADER + UNMARKED + "\n")
    status, _, err = cli(capfd, course, "diff", str(path))
    assert status == 2 and "a mutant must differ from it" in err
    assert path.read_text() == HEADER + UNMARKED + "\n"


def test_diff_refuses_a_file_that_is_already_a_patch(course, capfd):
    path = mutant_path(course, HEADER + make_patch(UNMARKED, WRONG) + "\n")
    status, _, err = cli(capfd, course, "diff", str(path))
    assert status == 2 and "already a patch" in err


def test_show_at_a_revision_mends_a_stale_mutant(course, capfd):
    git = ["git", "-C", str(course), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "source"], check=True)
    subprocess.run([*git, "commit", "-qm", "source"], check=True)
    path = mutant_path(course, HEADER + make_patch(UNMARKED, WRONG) + "\n")
    write_source(course, CELL.replace("total = 0.0", "total = 0"))
    assert cli(capfd, course, "show", str(path))[0] == 2
    assert cli(capfd, course, "show", str(path), "--at", "HEAD") == (0, WRONG + "\n", "")


# ---- the repository's mutants ----

@pytest.mark.parametrize("assignment", list_assignments())
def test_every_mutant_applies_to_its_source_cell(assignment):
    nb = nbformat.read(str(source_notebook(assignment)), as_version=4)
    for path in mutant_files(assignment):
        mutant = parse_mutant(path)
        assert mutated_source(mutant, nb).strip(), path
