"""The student copy (``python -m autograder student-copy``) contains no solution and no hidden test."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from autograder.course import list_assignments, source_notebook
from autograder.student_copy import make_student_copy

MIN_LINE = 25  # shorter lines ("return model", "for p in params:") are not telling
TEXT_SUFFIXES = {".py", ".ipynb", ".md", ".json", ".txt", ".yml", ".toml", ".cfg"}


def _secret_and_public(nb) -> tuple[set[str], set[str]]:
    """Stripped lines inside solution/hidden blocks, and those outside them, of a source notebook."""
    secret, public = set(), set()
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN SOLUTION" in line or "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END SOLUTION" in line or "END HIDDEN TESTS" in line:
                inside = False
            else:
                (secret if inside else public).add(line.strip())
    return secret, public


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return make_student_copy(tmp_path_factory.mktemp("handout") / "course")


def test_copy_has_no_instructor_side(copy):
    assert not (copy / "autograder").exists()
    assert not (copy / "source").exists()
    assert (copy / "release").is_dir() and (copy / "notebooks").is_dir() and (copy / "helpers").is_dir()
    for name in ("README.md", "Makefile", "pyproject.toml", "requirements.txt", "environment.yml"):
        assert (copy / name).is_file(), name


def test_the_copy_makefile_is_the_course_makefile_cut_to_setup_lab_and_book(copy):
    course = (Path(__file__).resolve().parents[1] / "Makefile").read_text().split("\n\n")
    student = (copy / "Makefile").read_text()
    for target in ("setup:", "$(STAMP):", "lab:", "book:"):  # each rule with its comments, as the course has it
        block = next(b for b in course if any(line.startswith(target) for line in b.splitlines()))
        assert block in student, target
    assert not any(f"\n{target}:" in student for target in ("test", "check", "release", "store", "grade", "bench"))
    assert "autograder" not in student and ".PHONY: setup lab book\n" in student


def test_student_helpers_never_import_the_instructor_side(copy):
    for path in (copy / "helpers").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.split(".")[0] == "autograder" for n in names), f"{path} imports {names}"


def test_no_solution_or_hidden_test_text_in_the_copy(copy):
    secret, public = set(), set()
    for assignment in list_assignments():
        s, p = _secret_and_public(nbformat.read(source_notebook(assignment), as_version=4))
        secret |= s
        public |= p
    telling = {line for line in secret - public if len(line) >= MIN_LINE and not line.startswith("#")}
    assert telling, "no solution lines found: the check would prove nothing"
    leaks = []
    for path in copy.rglob("*"):
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            text = path.read_text(errors="replace")
            if path.suffix == ".ipynb":  # compare cell sources, not JSON-escaped text
                text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
            leaks += [f"{path.relative_to(copy)}: {line}" for line in telling if line in text]
    assert not leaks, "solution or hidden-test text in the student copy:\n" + "\n".join(sorted(leaks)[:20])


def test_chapters_link_to_release_not_source(copy):
    for path in (copy / "notebooks").glob("*.ipynb"):
        text = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        assert "source/" not in text.replace("open-source", ""), f"{path.name} points students to source/"


def test_the_copy_builds_its_book_without_the_grader(copy, tmp_path):
    """``make book`` in a student's copy, where ``autograder`` (the instructor's side) cannot be imported."""
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    chapter = new_notebook(cells=[new_markdown_cell("# 1. Tiny\n\n*About 1 minutes.*"),
                                  new_code_cell("print('ran without the grader')")],
                           metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                    "language": "python"}})
    nbformat.write(chapter, str(chapters / "01_tiny.ipynb"))
    out = tmp_path / "html"
    code = ("import runpy, sys; sys.modules['autograder'] = None; "
            f"sys.argv = ['build.py', '--chapters', {str(chapters)!r}, '--out', {str(out)!r}]; "
            "runpy.run_path('book/build.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=copy, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "run under nbval: 01_tiny.ipynb" in proc.stdout  # nbval ran it, in a kernel of its own
    assert "ran without the grader" in (out / "notebooks" / "01_tiny.html").read_text()


def test_the_copy_runs_a_students_notebook_under_torchrun(copy, tmp_path):
    """``python -m helpers.launch`` ships with the copy and, on an unsolved notebook, names what is missing
    before it starts any rank."""
    assert (copy / "helpers" / "l06_gradient_sharding" / "launch.py").is_file()
    notebook = copy / "release" / "06_gradient_sharding" / "06_gradient_sharding.ipynb"
    proc = subprocess.run([sys.executable, "-m", "helpers.launch", str(notebook), "--workdir", str(tmp_path)],
                          cwd=copy, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "not implemented yet: Zero2Optimizer" in proc.stderr
    assert "torch.distributed.run" not in proc.stdout
