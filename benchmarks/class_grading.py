"""A class graded two ways in one run: stock sequential ``nbgrader autograde`` against ``grade-class``.

    python benchmarks/class_grading.py [ASSIGNMENT] [--students N] [--jobs J] [--no-hang]

Builds a throwaway course holding ASSIGNMENT (default 04_accumulation) and a synthetic class
of N submissions (default 32): correct ones (the source notebook), partly wrong ones (the
assignment's mutants in turn), one that hangs (a solution cell that loops forever, stopped by
the grader's time limit; left out with ``--no-hang``) and three malformed ones (not JSON;
another assignment's notebook; a graded cell's grade_id renamed). It grades the class with
stock ``nbgrader autograde ASSIGNMENT --create --force`` (one process, one student after
another), reads every score from the gradebook, grades the class again with
``python -m autograder grade-class ASSIGNMENT --jobs J``, and exits 1 unless every student's
score is the same. Prints both wall times, their ratio and the machine's core count.
"""
from __future__ import annotations

import argparse
import collections
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import nbformat.v4

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.course import CONFIG_FILE, read_notebook, release_notebook, source_notebook  # noqa: E402
from autograder.delegation import leftover_notebook  # noqa: E402
from autograder.grading import ScratchCourse  # noqa: E402
from autograder.mutation import mutant_files, parse_mutant, splice  # noqa: E402
from autograder.classroom import gradebook_score, submitted_students  # noqa: E402
from autograder.quiet import captured_output  # noqa: E402

HANG = "def {name}(*args, **kwargs):\n    while True:\n        pass\n"


def make_course(assignment: str, workdir: Path) -> Path:
    """A course directory holding ``assignment`` in its gradebook, with the course's nbgrader config."""
    with captured_output():
        ScratchCourse(assignment, ROOT, workdir)
    (workdir / "nbgrader_config.py").write_text(
        f"load_subconfig({str(CONFIG_FILE)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(workdir)!r}  # noqa: F821\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(workdir / 'gradebook.db')!r}  # noqa: F821\n",
        encoding="utf-8")
    return workdir


def hanging(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The source with its first solution function replaced by an endless loop."""
    nb = nbformat.from_dict(source)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.source.lstrip().startswith("def "):
            name = cell.source.split("def ", 1)[1].split("(", 1)[0]
            cell.source = HANG.format(name=name)
            return nb
    raise ValueError("no solution function to make hang")


def renamed_grade_id(source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The source with its first graded test cell's grade_id changed."""
    nb = nbformat.from_dict(source)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            meta["grade_id"] = meta["grade_id"] + "_renamed"
            return nb
    raise ValueError("no test cell")


def with_extra_cell(release: nbformat.NotebookNode, code: str, before_last_test: bool) -> nbformat.NotebookNode:
    """The release (all stubs) plus one code cell: after the import cell, or before the last test cell."""
    nb = nbformat.from_dict(release)
    graded = [i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade")
              and not c.metadata["nbgrader"].get("solution")]
    imports = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "imports")
    nb.cells.insert(graded[-1] if before_last_test else imports + 1, nbformat.v4.new_code_cell(code))
    return nb


def hostile(kind: str, source: nbformat.NotebookNode, release: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """An all-stub release with one attacking cell (see HOSTILE)."""
    if kind == HOSTILE["hostile_leftover_ref"]:
        _, calls_ref = leftover_notebook(source, release)
        last = [c for c in calls_ref.cells if c.metadata.get("nbgrader", {}).get("solution")][-1]
        return with_extra_cell(release, last.source, before_last_test=True)
    forge = "import helpers.runtime.remote as r\nr.serve = lambda request: r.encode({'value': 0.0})"
    return with_extra_cell(release, forge, before_last_test=False)


# All stubs plus one cell: the last answer calls the name hidden blocks bind (`ref`), or the
# kernel's half of the grader answers every request itself. Both must score 0 on every path.
HOSTILE = {"hostile_leftover_ref": "stubs + a cell calling the hidden blocks' ref",
           "hostile_forged_answers": "stubs + a cell forging the kernel's answers"}


def make_class(assignment: str, course: Path, students: int, hang: bool) -> dict[str, str]:
    """Write ``students`` submissions under ``submitted/``; {student: what it is}."""
    source = read_notebook(source_notebook(assignment, ROOT))
    other = next(p for p in sorted((ROOT / "source").iterdir()) if p.name != assignment)
    special = {"malformed_not_json": "not JSON",
               "malformed_other_assignment": f"{other.name}'s notebook",
               "malformed_renamed_grade_id": "a test cell's grade_id renamed", **HOSTILE}
    if hang:
        special["hangs"] = "a solution that loops forever"
    mutants = {path.stem: path for path in mutant_files(assignment, ROOT)}
    cycle = itertools.cycle(mutants)
    kinds = dict(special)
    for k in range(students - len(special)):
        kinds[f"student{k + 1:02d}"] = "correct" if k % 2 == 0 else f"mutant {next(cycle)}"
    for student, kind in kinds.items():
        target = course / "submitted" / student / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        if kind == "not JSON":
            target.write_text("this is not a notebook\n", encoding="utf-8")
            continue
        if kind == "correct":
            nb = source
        elif kind.startswith("mutant "):
            nb = splice(source, parse_mutant(mutants[kind.split()[1]]))
        elif kind == special.get("hangs"):
            nb = hanging(source)
        elif kind == special["malformed_renamed_grade_id"]:
            nb = renamed_grade_id(source)
        elif kind in HOSTILE.values():
            nb = hostile(kind, source, read_notebook(release_notebook(assignment, ROOT)))
        else:
            nb = read_notebook(source_notebook(other.name, ROOT))
        nbformat.write(nb, str(target))
    return kinds


def scores(assignment: str, course: Path) -> dict[str, tuple[float | None, float | None]]:
    """{student: (score, max_score)} from the course's gradebook; (None, None) if not graded."""
    return {s: gradebook_score(course, assignment, s) for s in submitted_students(assignment, course)}


@dataclass
class Comparison:
    """Both gradings of one class: wall seconds, exit codes, grade-class's output, differing scores."""

    stock_s: float
    stock_exit: int
    ours_s: float
    ours_exit: int
    ours_output: str
    differ: list[str]


def grade_both(assignment: str, course: Path, jobs: int, kinds: dict[str, str]) -> Comparison:
    """Grade the class with stock sequential nbgrader autograde, then with grade-class; compare."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    start = time.monotonic()
    stock = subprocess.run([sys.executable, "-m", "nbgrader", "autograde", assignment, "--create", "--force"],
                           cwd=course, env=env, capture_output=True, text=True)
    stock_s = time.monotonic() - start
    first = scores(assignment, course)
    start = time.monotonic()
    ours = subprocess.run([sys.executable, "-m", "autograder", "--root", str(course), "grade-class",
                           assignment, "--jobs", str(jobs)], cwd=ROOT, env=env, capture_output=True, text=True)
    ours_s = time.monotonic() - start
    second = scores(assignment, course)
    differ = [f"{s} ({kinds[s]}): nbgrader autograde {first[s]}, grade-class {second.get(s)}"
              for s in first if first[s] != second.get(s)]
    return Comparison(stock_s, stock.returncode, ours_s, ours.returncode, ours.stdout + ours.stderr, differ)


def main(argv: list[str] | None = None) -> int:
    """Grade the synthetic class both ways; 0 when every score is the same."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignment", nargs="?", default="04_accumulation")
    parser.add_argument("--students", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-hang", action="store_true", help="leave out the hanging submission")
    args = parser.parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="class-grading-"))
    try:
        course = make_course(args.assignment, workdir)
        kinds = make_class(args.assignment, course, args.students, not args.no_hang)
        result = grade_both(args.assignment, course, args.jobs, kinds)
        print(result.ours_output, end="")
        for line in result.differ:
            print(f"DIFFERENT: {line}")
        mix = collections.Counter(kind.split()[0] if kind.startswith(("mutant", "correct")) else kind
                                  for kind in kinds.values())
        print(f"{len(kinds)} submissions of {args.assignment} on {os.cpu_count()} cores: "
              + ", ".join(f"{count} {kind}" for kind, count in mix.items()))
        print(f"stock sequential nbgrader autograde: {result.stock_s:.1f} s (exit {result.stock_exit})")
        print(f"python -m autograder grade-class --jobs {args.jobs}: {result.ours_s:.1f} s (exit {result.ours_exit})")
        print(f"ratio: {result.stock_s / result.ours_s:.2f}x; "
              f"scores {'identical' if not result.differ else 'DIFFERENT'}")
        return 1 if result.differ else 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
