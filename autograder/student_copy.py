"""The student copy of the course: what an instructor hands out, generated, never hand-made.

``python -m autograder student-copy DEST`` writes the release notebooks, the chapters, the
student-side ``helpers`` package (with its stored results) and set-up files for the pip and
conda routes. It holds no ``source/``, no ``autograder/`` and so no solution, reference,
hidden test or mutant; ``tests/test_student_copy.py`` proves it.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from .course import CourseError, course_root

COPIED = ("release", "notebooks", "book", "helpers", "requirements.txt", "requirements-lock.txt", "environment.yml")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")

PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "shard-course-student"
version = "0.1.0"
description = "Replicate computation and shard training state: the student copy"
requires-python = ">=3.11,<3.12"
dependencies = ["torch==2.13.0", "numpy", "matplotlib", "ipywidgets", "cloudpickle", "nbgrader==0.9.6"]

[tool.setuptools.packages.find]
include = ["helpers", "helpers.*"]
namespaces = false

[tool.setuptools.package-data]
helpers = ["stored/*.json"]
'''

STUDENT_TARGETS = ("setup", "$(STAMP)", "lab", "book")
STUDENT_HEADER = ("# `make lab`: create .venv if needed, install the pinned dependencies, open JupyterLab.\n"
                  "# `make book`: the chapters as a static site.")


def student_makefile(course: str) -> str:
    """The course's Makefile cut to what a student runs: its variables and its setup, lab and book rules.

    Blocks are separated by blank lines; a rule block is kept with its comments when its target
    is one of :data:`STUDENT_TARGETS`.
    """
    kept = []
    for block in course.strip("\n").split("\n\n"):
        lines = block.splitlines()
        code = [line for line in lines if not line.startswith("#")]
        if not code:
            continue
        if "?=" in code[0] or ":=" in code[0]:
            kept.append("\n".join([STUDENT_HEADER, *code]))
        elif code[0].startswith(".PHONY:"):
            kept.append(".PHONY: " + " ".join(t for t in STUDENT_TARGETS if not t.startswith("$")))
        elif code[0].split(":")[0] in STUDENT_TARGETS:
            kept.append(block)
    return "\n\n".join(kept) + "\n"


NBGRADER_CONFIG = (
    '"""nbgrader settings for Validate in the student copy (the grading settings stay with the instructor)."""\n'
    'c = get_config()  # noqa: F821\n'
    'c.Execute.timeout = 300\n'
    'c.Execute.kernel_name = "python3"\n'
)

README = '''# Replicate computation and shard training state (student copy)

Lessons on data-parallel and sharded training in PyTorch, each a chapter in `notebooks/`
(read, run, explore) and an assignment in `release/` (implement, Validate, hand in).

    make lab    # creates .venv, installs the pinned dependencies (torch==2.13.0 CPU), opens JupyterLab
    make book   # the chapters as a website with their outputs and "mark as done": _build/book/index.html

Conda users: `conda env create -f environment.yml`.

1. Read the chapter `notebooks/NN_*.ipynb`, then open `release/NN_*/NN_*.ipynb`.
2. Replace each `raise NotImplementedError()` with your code and run the test cell below it:
   visible tests teach the contract; hidden tests, added when your work is graded, decide the grade.
3. Press **Validate** before you hand in.

Grading runs your notebook with hidden tests on the instructor's side. It refuses a cell that
could change how your work is checked (one that imports the grader, registers IPython
transformers or magics beyond `%time`/`%timeit`/`%matplotlib`, rebinds attributes of imported
modules, or reaches interpreter internals such as `sys.modules` or `__globals__`): such a cell
is not run and scores nothing. No exercise needs any of that.
'''


def make_student_copy(dest: Path | str, root: Path | str | None = None) -> Path:
    """Write the student copy of the course at ``dest`` (which must not exist); return it."""
    root, dest = course_root(root), Path(dest)
    if dest.exists():
        raise CourseError(f"{dest} already exists; choose a new directory")
    dest.mkdir(parents=True)
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=IGNORED)
        elif src.is_file():
            shutil.copy2(src, dest / name)
        else:
            raise CourseError(f"{src} is missing: the student copy needs it")
    (dest / "pyproject.toml").write_text(PYPROJECT)
    (dest / "Makefile").write_text(student_makefile((root / "Makefile").read_text(encoding="utf-8")))
    (dest / "nbgrader_config.py").write_text(NBGRADER_CONFIG)
    (dest / "README.md").write_text(README)
    return dest
