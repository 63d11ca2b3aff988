"""Command line: ``python -m autograder {release,grade,grade-class,check,store,student-copy,mutant}``.

    python -m autograder release [ASSIGNMENT ...] [--check]
    python -m autograder grade NOTEBOOK [--assignment NAME] [--json]
    python -m autograder grade-class ASSIGNMENT [--from FOLDER] [--jobs N]
    python -m autograder check [ASSIGNMENT ...] [--budget SECONDS]
    python -m autograder store [--check]
    python -m autograder student-copy DEST
    python -m autograder mutant diff PATH
    python -m autograder mutant {show,expand} PATH [--at REV]

``mutant`` writes and mends mutant files (header + a patch of the source's solution cell,
:mod:`autograder.mutation`): ``diff`` turns a file written as header + whole cell into the patch
form in place; ``show`` prints the mutated cell; ``expand`` writes it back as header + whole cell,
to edit and ``diff`` again. ``--at REV`` applies the patch to the source notebook as it was at git
revision REV (to mend a mutant whose source cell has changed since).

Exit status: 0 on success (``grade``: whenever grading ran, whatever the score),
1 when ``release --check`` or ``check`` finds a problem or ``grade-class`` could not
grade a submission (the others are graded), 2 when a command cannot run
(with a one-line reason on stderr), as ``grade-class`` and ``check`` cannot without the
kernels' sandbox (bubblewrap, :mod:`autograder.sandbox`). ``grade`` (self-study) grades
without it where it cannot start, and says so in a note.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .check import BUDGET_S, JOBS, run_check
from .course import CourseError
from .grading import GradeResult, grade_notebook
from .quiet import captured_output
from .release import release
from .sandbox import SandboxUnavailable
from .warm_kernels import use_sandbox


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(prog="python -m autograder",
                                     description="Release, grade and check the nbgrader assignments.")
    parser.add_argument("--root", type=Path, default=None,
                        help="course directory (default: this repository)")
    commands = parser.add_subparsers(dest="command", required=True)

    rel = commands.add_parser("release", help="regenerate release/ from source/ with nbgrader")
    rel.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    rel.add_argument("--check", action="store_true",
                     help="only compare a fresh generation with the committed release/")

    grade = commands.add_parser("grade", help="autograde one student notebook")
    grade.add_argument("notebook", type=Path, metavar="NOTEBOOK")
    grade.add_argument("--assignment", help="default: the notebook's file name stem")
    grade.add_argument("--json", action="store_true", help="print one JSON object")

    klass = commands.add_parser("grade-class", help="autograde every submission of an assignment into the gradebook")
    klass.add_argument("assignment", metavar="ASSIGNMENT")
    klass.add_argument("--from", dest="folder", type=Path, default=None,
                       help="a folder of notebooks (e.g. an LMS download) to copy into submitted/<student>/ first")
    klass.add_argument("--jobs", type=int, default=2, help="gradings at once (default 2)")

    check = commands.add_parser("check", help="prove every assignment grades as promised")
    check.add_argument("assignments", nargs="*", metavar="ASSIGNMENT", help="default: all")
    check.add_argument("--budget", type=float, default=BUDGET_S,
                       help=f"seconds of grading per assignment, summed over its gradings (default {BUDGET_S:g})")
    check.add_argument("--jobs", type=int, default=JOBS,
                       help=f"gradings at once, each worker process in its own sandbox (default {JOBS})")
    store = commands.add_parser("store", help="write the chapters' stored results (helpers/stored)")
    store.add_argument("--check", action="store_true", help="only report stored results that are out of date")
    copy = commands.add_parser("student-copy", help="write what students get (no solutions, no hidden tests)")
    copy.add_argument("dest", type=Path, metavar="DEST", help="a directory that does not exist yet")
    mutant = commands.add_parser("mutant", help="write and mend mutant files (a patch of a solution cell)",
                                 description="A mutant file is a '# key: value' header and a unified diff of the "
                                             "source notebook's solution cell (see autograder/mutation.py).")
    actions = mutant.add_subparsers(dest="action", required=True)
    diff = actions.add_parser("diff", help="header + whole cell -> header + patch against the source cell, in place")
    diff.add_argument("path", type=Path, metavar="PATH")
    for name, text in (("show", "print the mutated solution cell"),
                       ("expand", "header + patch -> header + whole mutated cell, in place (edit, then diff)")):
        action = actions.add_parser(name, help=text)
        action.add_argument("path", type=Path, metavar="PATH")
        action.add_argument("--at", metavar="REV", default=None,
                            help="apply the patch to the source notebook at git revision REV (default: as it is)")
    return parser.parse_args(argv)


def cmd_release(args: argparse.Namespace) -> int:
    """Regenerate release/, or with --check report the out-of-date notebooks."""
    with captured_output():
        stale = release(args.assignments, args.root, check=args.check)
    if stale:
        print("release/ is out of date with source/ (run `python -m autograder release`):",
              file=sys.stderr)
        for line in stale:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("release/ is in sync with source/" if args.check else "release/ regenerated")
    return 0


def format_table(result: GradeResult) -> str:
    """A readable report of one grading."""
    lines = [f"{result.assignment}: {result.score:g} / {result.max_score:g}", ""]
    width = max([len(c.grade_id) for c in result.cells] + [7])
    lines.append(f"{'cell':<{width}}  {'score':>9}")
    for cell in result.cells:
        first, *rest = cell.message.splitlines() or [""]
        lines.append(f"{cell.grade_id:<{width}}  {cell.score:>4g}/{cell.max_score:<4g}  {first}".rstrip())
        lines.extend(f"{'':<{width}}  {'':9}  {line}".rstrip() for line in rest)
    lines.extend(f"note: {note}" for note in result.notes)
    return "\n".join(lines)


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade one notebook and print its scores."""
    with captured_output():
        # self-study: sandboxed where bubblewrap works, else graded anyway, with a note saying so
        result = grade_notebook(args.notebook, args.assignment, args.root, sandbox="optional")
    print(json.dumps(result.to_json()) if args.json else format_table(result))
    return 0


def cmd_grade_class(args: argparse.Namespace) -> int:
    """Grade a class with progress lines; 1 if a submission could not be graded."""
    from .classroom import grade_class
    start = time.monotonic()
    results = grade_class(args.assignment, args.root, args.jobs, args.folder, out=sys.stdout)
    failed = [g.student for g in results if not g.ok]
    print(f"{len(results)} submissions of {args.assignment} in {time.monotonic() - start:.0f} s with "
          f"{args.jobs} at once; {len(results) - len(failed)} graded, {len(failed)} not graded"
          + (f" ({', '.join(sorted(failed))})" if failed else ""))
    return 1 if failed else 0


def cmd_check(args: argparse.Namespace) -> int:
    """Run the course check; 1 if any row failed."""
    with captured_output() as out:
        rows = run_check(args.assignments, args.root, args.budget, out=out, jobs=args.jobs)
    failed = [row for row in rows if not row.ok]
    print(f"{len(rows) - len(failed)} OK, {len(failed)} FAIL")
    return 1 if failed else 0


def cmd_store(args: argparse.Namespace) -> int:
    """Write helpers/stored, or with --check report the stale files."""
    from .store import store  # imports every lesson module: only when asked
    with captured_output():
        stale = store(check=args.check)
    if stale:
        print("helpers/stored is out of date (run `python -m autograder store`):", file=sys.stderr)
        for line in stale:
            print(f"  {line}", file=sys.stderr)
        return 1
    print("helpers/stored is in sync" if args.check else "helpers/stored written")
    return 0


def cmd_student_copy(args: argparse.Namespace) -> int:
    """Write the student copy of the course."""
    from .student_copy import make_student_copy
    print(f"student copy written to {make_student_copy(args.dest, args.root)}")
    return 0


def cmd_mutant(args: argparse.Namespace) -> int:
    """Convert, print or expand one mutant file."""
    from .course import course_root
    from .mutation import diff_in_place, expand_in_place, show
    root = course_root(args.root)
    if args.action == "diff":
        mutant = diff_in_place(args.path, root)
        print(f"{args.path}: now a patch of {mutant.grade_id!r} ({len(mutant.patch)} hunk(s))")
    elif args.action == "show":
        print(show(args.path, root, args.at))
    else:
        expand_in_place(args.path, root, args.at)
        print(f"{args.path}: now the whole mutated cell; edit it, then `python -m autograder mutant diff {args.path}`")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    commands = {"release": cmd_release, "grade": cmd_grade, "grade-class": cmd_grade_class, "check": cmd_check,
                "store": cmd_store, "student-copy": cmd_student_copy, "mutant": cmd_mutant}
    try:
        if args.command in ("grade-class", "check"):  # for credit: no sandbox, no grading (one line, exit 2)
            use_sandbox("required")
        return commands[args.command](args)
    except (CourseError, SandboxUnavailable) as exc:
        print(f"autograder {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
