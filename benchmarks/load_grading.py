"""Same score idle or loaded: grade every source notebook idle, then next to busy processes.

    python benchmarks/load_grading.py [ASSIGNMENT ...] [--busy N] [--write-budgets | --loaded-only]

Pass 1 grades each assignment's source notebook on the machine as it is; pass 2 grades
them again while ``N`` (default: one per core) ``python -c 'while 1: pass'`` processes
started here keep every core busy; they are stopped afterwards. Exit status 1 if any
score differs between the passes. ``--loaded-only`` skips pass 1 and compares pass 2
with full marks, the idle score of every source (``python -m autograder check`` grades
each source twice and requires full marks; ``make test`` runs both). ``--write-budgets``
stores pass 1's per-cell wall times in ``autograder/cell_seconds.json`` (replacing those of the
assignments graded, keeping the others'), the measured
need the grader's per-cell time limits are budgeted from (:mod:`autograder.budget`).
Prints one line per grading and the total duration.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autograder.budget import SECONDS_FILE  # noqa: E402
from autograder.course import list_assignments, read_notebook, source_notebook  # noqa: E402
from autograder.grading import GradeResult, grade_notebook, nbgrader_meta  # noqa: E402
from autograder.quiet import captured_output  # noqa: E402


@contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """``count`` processes spinning on a core each for the duration of the block."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


def grade_all(assignments: list[str], label: str) -> dict[str, GradeResult]:
    """Grade each assignment's source notebook; print one line each."""
    results = {}
    for name in assignments:
        with captured_output():
            result = grade_notebook(source_notebook(name), name)
        results[name] = result
        print(f"{label:>6}  {name:<32} {result.score:g}/{result.max_score:g}  {result.seconds:6.1f} s", flush=True)
    return results


def differences(idle: dict[str, dict[str, float]], loaded: dict[str, GradeResult]) -> list[str]:
    """One line per cell whose loaded score differs from its idle score (``idle``: name -> grade_id -> points)."""
    found = []
    for name, expected in idle.items():
        second = {c.grade_id: c for c in loaded[name].cells}
        for grade_id, score in expected.items():
            other = second.get(grade_id)
            if other is None or other.score != score:
                got = ("missing" if other is None
                       else f"{other.score:g} ({other.message.splitlines()[0] if other.message else ''})")
                found.append(f"{name} {grade_id}: idle {score:g}, loaded {got}")
    return found


def cell_scores(results: dict[str, GradeResult]) -> dict[str, dict[str, float]]:
    """Points per graded cell of each grading."""
    return {name: {c.grade_id: c.score for c in r.cells} for name, r in results.items()}


def full_marks(names: list[str]) -> dict[str, dict[str, float]]:
    """Points per graded cell of each source notebook: what its idle grading earns."""
    found = {}
    for name in names:
        cells = read_notebook(source_notebook(name)).cells
        found[name] = {nbgrader_meta(c)["grade_id"]: float(nbgrader_meta(c)["points"])
                       for c in cells if nbgrader_meta(c).get("grade")}
    return found


def main(argv: list[str] | None = None) -> int:
    """Run both passes; 0 when every score is the same."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="default: all")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="spinning processes in pass 2")
    passes = parser.add_mutually_exclusive_group()
    passes.add_argument("--write-budgets", action="store_true", help="store pass 1's per-cell seconds")
    passes.add_argument("--loaded-only", action="store_true", help="skip pass 1: compare pass 2 with full marks")
    args = parser.parse_args(argv)
    names = args.assignments or list_assignments()
    start = time.monotonic()
    if not args.loaded_only:
        idle = grade_all(names, "idle")
    if args.write_budgets:
        measured = {name: {c.grade_id: round(c.seconds, 2) for c in r.cells} for name, r in idle.items()}
        kept = json.loads(SECONDS_FILE.read_text(encoding="utf-8")) if SECONDS_FILE.is_file() else {}
        kept = {name: cells for name, cells in kept.items() if name in list_assignments()}  # other assignments'
        SECONDS_FILE.write_text(json.dumps({**kept, **measured}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    with busy_cores(args.busy):
        loaded = grade_all(names, "loaded")
    found = differences(full_marks(names) if args.loaded_only else cell_scores(idle), loaded)
    for line in found:
        print(f"DIFFERENT: {line}")
    print(f"{len(names)} assignments, {args.busy} busy processes in pass 2: "
          f"{'scores identical' if not found else f'{len(found)} cell(s) differ'}; "
          f"took {time.monotonic() - start:.0f} s")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
