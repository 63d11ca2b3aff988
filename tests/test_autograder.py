"""Tests of the autograder's API and command line on a tiny throwaway assignment.

They build their own course directory in ``tmp_path`` so they do not depend on the real
course content, and never write into the repository.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.course import CourseError, release_notebook, source_notebook
from autograder.grading import GradingError, grade_notebook, scratch_course
from autograder.mutation import MutantError, parse_mutant, splice
from autograder.release import release

NAME = "00_tiny"
SOLUTION = "def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"
VISIBLE = "assert add(1, 2) == 3"
HIDDEN = ("assert add(1, 2) == 3\n### BEGIN HIDDEN TESTS\nassert add(2.5, 0.25) == 2.75\n"
          "assert add('a', 'b') == 'ab'\n### END HIDDEN TESTS")
MUTANT = ("# assignment: 00_tiny\n# grade_id: add\n# catches: truncates floats to int\n"
          "def add(a, b):\n    return int(a) + int(b)\n")


def nbgrader_cell(source: str, grade_id: str, *, solution: bool = False, points: float = 0):
    """A code cell with nbgrader metadata: a solution cell, or a locked test cell."""
    meta = {"grade": not solution, "grade_id": grade_id, "locked": not solution,
            "schema_version": 3, "solution": solution, "task": False}
    if not solution:
        meta["points"] = points
    return new_code_cell(source, metadata={"nbgrader": meta})


def tiny_notebook():
    """The instructor version of the tiny assignment: one solution cell, two test cells."""
    nb = new_notebook(cells=[
        new_markdown_cell("# Tiny\nImplement `add`."),
        nbgrader_cell(SOLUTION, "add", solution=True),
        nbgrader_cell(VISIBLE, "test_add_visible", points=1),
        nbgrader_cell(HIDDEN, "test_add_hidden", points=2),
    ])
    nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata.language_info = {"name": "python"}
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
    return nb


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A course root holding the tiny assignment, its release and one mutant."""
    root = tmp_path_factory.mktemp("course")
    path = source_notebook(NAME, root)
    path.parent.mkdir(parents=True)
    nbformat.write(tiny_notebook(), str(path))
    release([NAME], root)
    mutant = root / "autograder" / "mutants" / NAME / "truncates.py"
    mutant.parent.mkdir(parents=True)
    mutant.write_text(MUTANT)
    return root
