"""Throwaway nbgrader courses for the autograder's tests: cells with nbgrader metadata, an assignment.

The tests build their own course directory under ``tmp_path`` so they depend neither on the
real course content nor write into the repository.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_notebook

from autograder.course import source_notebook
from autograder.release import release


def nbgrader_cell(source: str, grade_id: str, *, solution: bool = False, points: float | None = None) -> NotebookNode:
    """A code cell with nbgrader metadata: a solution cell, a graded test cell (``points``) or a locked cell."""
    meta = {"grade": points is not None, "grade_id": grade_id, "locked": not solution,
            "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return new_code_cell(source, metadata={"nbgrader": meta})


def with_hidden(visible: str, hidden: str) -> str:
    """A test cell's source: ``visible`` lines, then ``hidden`` ones between nbgrader's hidden-test markers."""
    block = f"### BEGIN HIDDEN TESTS\n{hidden}\n### END HIDDEN TESTS" if hidden else ""
    return "\n".join(part for part in (visible, block) if part) or "pass"


def assignment_notebook(cells: list[NotebookNode]) -> NotebookNode:
    """A source notebook of ``cells`` with a python3 kernelspec and stable cell ids."""
    nb = new_notebook(cells=cells)
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.language_info = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    return nb


def write_assignment(root: Path, name: str, nb: NotebookNode) -> Path:
    """Write ``nb`` as the source of assignment ``name`` under ``root``, generate its release; ``root``."""
    path = source_notebook(name, root)
    path.parent.mkdir(parents=True)
    nbformat.write(nb, str(path))
    release([name], root)
    return root
