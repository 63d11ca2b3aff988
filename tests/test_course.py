"""Course-wide invariants of the committed notebooks (fast: no kernels are started)."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograder.course import list_assignments, mutants_dir, release_notebook, source_notebook
from autograder.mutation import design_files, mutant_files, parse_design, parse_mutant

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENTS = list_assignments()
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
CHECK_TAG = "nbval-check-output"  # nbval compares such a chapter cell's output with the stored one (book/nbval_book.py)


def _nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _between(source: str, begin: str, end: str) -> list[str]:
    """Non-trivial lines between ``### BEGIN x`` and ``### END x`` markers."""
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
        elif end in line:
            inside = False
        elif inside and len(line.strip()) > 12 and not line.strip().startswith("#"):
            lines.append(line.strip())
    return lines


def test_there_are_assignments() -> None:
    assert "01_replicated_training" in ASSIGNMENTS


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_has_no_solutions_or_hidden_tests(assignment: str) -> None:
    source = nbformat.read(source_notebook(assignment), as_version=4)
    release_text = release_notebook(assignment).read_text()
    for marker in MARKERS:
        assert marker not in release_text, f"{assignment}: release contains {marker!r}"
    for cell in source.cells:
        secret = _between(cell.source, "BEGIN SOLUTION", "END SOLUTION") + _between(
            cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
        leaked = [line for line in secret if line in release_text and line not in _public_lines(source)]
        assert not leaked, f"{assignment}: release leaks {leaked[:3]}"


def _public_lines(nb) -> str:
    """Text of the source notebook outside solution and hidden-test regions."""
    kept = []
    for cell in nb.cells:
        hidden = False
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                hidden = True
            elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                hidden = False
            elif not hidden:
                kept.append(line.strip())
    return "\n".join(kept)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_stubs_raise_not_implemented(assignment: str) -> None:
    release = nbformat.read(release_notebook(assignment), as_version=4)
    solutions = [c for c in release.cells if _nbgrader(c).get("solution") and c.cell_type == "code"]
    assert solutions, f"{assignment}: no solution cells"
    for cell in solutions:
        assert "raise NotImplementedError()" in cell.source, _nbgrader(cell)["grade_id"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_source_follows_the_assignment_conventions(assignment: str) -> None:
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    assert nb.metadata.kernelspec.name == "python3"
    graded = [c for c in nb.cells if _nbgrader(c).get("grade")]
    ids = [_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_ids in {assignment}"
    assert 4 <= len(graded) <= 7, f"{assignment} has {len(graded)} graded cells"
    points = sum(_nbgrader(c)["points"] for c in graded)
    assert points % 5 == 0, f"{assignment}: points sum to {points}, not a round number"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "source must be stored without outputs"
    for cell in graded:
        assert _nbgrader(cell)["locked"], f"test cell {_nbgrader(cell)['grade_id']} must be locked"
        assert "BEGIN HIDDEN TESTS" in cell.source, f"{_nbgrader(cell)['grade_id']} has no hidden tests"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_assignment_has_a_chapter_without_its_solutions(assignment: str) -> None:
    chapter = ROOT / "notebooks" / f"{assignment}.ipynb"
    assert chapter.exists(), f"no chapter for {assignment}"
    chapter_nb = nbformat.read(chapter, as_version=4)
    for number, cell in enumerate(c for c in chapter_nb.cells if c.cell_type == "code"):
        if CHECK_TAG in cell.metadata.get("tags", []):  # nbval compares it only with an output and a run number
            assert cell.outputs and cell.execution_count == number + 1, (
                f"{chapter.name}, code cell {number}: tagged {CHECK_TAG} but stored without its expected output "
                "(write it with: python -m pytest -p book.nbval_book --nbval-lax --book-accept CHAPTER)")
        else:
            assert not cell.outputs and cell.execution_count is None, (
                f"{chapter.name}, code cell {number}: stored with an output; only cells tagged {CHECK_TAG} keep one")
    chapter_code = "\n".join(c.source for c in chapter_nb.cells if c.cell_type == "code")
    source = nbformat.read(source_notebook(assignment), as_version=4)
    for cell in source.cells:
        if _nbgrader(cell).get("solution"):
            body = _between(cell.source, "BEGIN SOLUTION", "END SOLUTION")
            copied = [line for line in body if line in chapter_code]
            assert len(copied) < max(3, len(body) // 2), (
                f"{chapter.name} repeats most of the solution of {_nbgrader(cell)['grade_id']}")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_mutants_name_existing_solution_cells(assignment: str) -> None:
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    solution_ids = {_nbgrader(c)["grade_id"] for c in nb.cells if _nbgrader(c).get("solution")}
    files = mutant_files(assignment)
    assert len(files) >= 5, f"{assignment} has only {len(files)} mutants in {mutants_dir(assignment)}"
    for path in files:
        mutant = parse_mutant(path)
        assert mutant.assignment == assignment, path
        assert mutant.grade_id in solution_ids, f"{path.name}: unknown grade_id {mutant.grade_id}"
        assert re.search(r"\w", mutant.catches), f"{path.name}: empty catches line"


DESIGN_HEADING = re.compile(r"^## Design exercise \d+", re.MULTILINE)


def design_exercises(nb) -> dict[str, tuple[int, int]]:
    """Per design exercise (a markdown heading '## Design exercise N: ...'), its solution cell's grade_id
    mapped to (the points of the exercise's test cells, the notebook's total points)."""
    total = sum(_nbgrader(c).get("points", 0) for c in nb.cells)
    found, current = {}, None
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## "):
            current = None
            if DESIGN_HEADING.match(cell.source):
                current = "heading"
        elif current == "heading" and _nbgrader(cell).get("solution"):
            current = _nbgrader(cell)["grade_id"]
            found[current] = (0, total)
        elif current not in (None, "heading") and _nbgrader(cell).get("grade"):
            points, _ = found[current]
            found[current] = (points + _nbgrader(cell).get("points", 0), total)
    return found


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_design_exercises_have_several_correct_designs(assignment: str) -> None:
    """Every assignment has a design exercise, worth at least 30% of its points together, and at least two designs
    besides the source's (autograder/designs/, graded by the course check) must earn full marks."""
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    exercises = design_exercises(nb)
    designs = [parse_design(path) for path in design_files(assignment)]
    for design in designs:
        assert design.assignment == assignment, design.path
        assert design.grade_id in exercises, f"{design.path.name}: {design.grade_id} is not a design exercise's cell"
    assert exercises, f"{assignment} has no design exercise (a heading '## Design exercise N: ...')"
    points = sum(p for p, _ in exercises.values())
    total = next(iter(exercises.values()))[1]
    assert points >= 0.3 * total, f"{assignment}: design exercises are worth {points} of {total} points"
    for grade_id in exercises:
        named = [d for d in designs if d.grade_id == grade_id]
        assert len(named) >= 2, f"{assignment}: design exercise {grade_id} has {len(named)} alternative designs"
