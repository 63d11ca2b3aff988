"""The whole test suite, as ``make test`` (and so CI) runs it.

    python tests/suite.py [--check-jobs N] [--check-budget SECONDS]

1. ``autograder release --check`` and ``autograder store --check``, the latter also as on
   another CPU (:data:`OTHER_CPU`: torch's portable kernels, MKL's compatible paths, one
   thread), and the linter, ``ruff check`` (configured in ``pyproject.toml``), at once (about
   a minute);
2. pytest, all but the tests marked ``alone``, and at the same time the course check
   (``autograder check``) as on another CPU (:data:`OTHER_CPU`: hidden tests' verdicts must
   not depend on the CPU; the machine's own settings are pytest's): pytest
   waits on browsers, kernels and time limits much of the time, and the check's gradings fill
   the cores meanwhile. The check's report goes to ``_build/course-check.log`` and is printed
   when both have ended;
3. with nothing beside them (the chapters' gloo groups slow down many times beside the check):
   the chapters under nbval (``--nbval-lax``: a cell that raises fails, and so does a cell
   tagged ``nbval-check-output`` that prints other than the output committed with it), two at
   a time in warm kernels, keeping each chapter that passed in the book's execution cache
   (``book/nbval_book.py``); then the tests marked ``alone``: the book, built from that cache
   without running a chapter again, in the browser. Not the load test (marked ``load``,
   ``pytest -m load``): the course check in 2 grades every source twice under more load than
   its spinning processes and requires full marks and equal scores.

Exit status 0 only when every part passed; pytest's exit code 5 (no tests collected) is a
failure. A ^C reaches every part (they share the terminal's process group); this script
waits for them to stop.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autograder.check import BUDGET_S, JOBS  # noqa: E402
from autograder.store import OTHER_CPU  # noqa: E402  (stored results must hold as another CPU rounds, too)
sys.path.insert(0, str(ROOT / "book"))
import nbval_book  # noqa: E402  (the chapters under nbval, kept for the book)
CHECK_LOG = ROOT / "_build" / "course-check.log"
NO_TESTS_COLLECTED = 5


def finish(process: subprocess.Popen) -> int:
    """Wait for ``process``; after a ^C, which it got too, wait for it to stop on its own."""
    try:
        return process.wait()
    except KeyboardInterrupt:
        process.wait()
        raise


def run(command: list[str]) -> int:
    """Run a command in the repository, its output on this terminal; its exit status."""
    return finish(subprocess.Popen(command, cwd=ROOT))


def run_at_once(commands: dict[str, tuple[list[str], dict[str, str]]]) -> dict[str, int]:
    """Start every command (with its extra environment variables), then wait for all; each one's
    exit status by name.

    For short checks that each keep one core busy (release --check, store --check, ruff check).
    """
    processes = {name: subprocess.Popen(command, cwd=ROOT, env={**os.environ, **extra})
                 for name, (command, extra) in commands.items()}
    try:
        return {name: process.wait() for name, process in processes.items()}
    except KeyboardInterrupt:
        for process in processes.values():
            process.wait()
        raise


def pytest(*args: str) -> int:
    """pytest on ``tests/`` with ``args``; 'no tests collected' counts as a failure."""
    code = run([sys.executable, "-m", "pytest", "tests", "--durations=20", *args])
    if code == NO_TESTS_COLLECTED:
        print(f"pytest {' '.join(args)} collected no tests: failing", flush=True)
    return code


def pytest_beside_check(jobs: int, budget: float) -> tuple[int, int]:
    """pytest, all but the tests marked ``alone``, while the course check runs as on another CPU; both exit statuses."""
    CHECK_LOG.parent.mkdir(exist_ok=True)
    start = time.monotonic()
    with open(CHECK_LOG, "w", encoding="utf-8") as log:
        check = subprocess.Popen([sys.executable, "-m", "autograder", "check", "--jobs", str(jobs),
                                  "--budget", f"{budget:g}"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                 env={**os.environ, **OTHER_CPU})
        print(f"course check running beside pytest; its report: {CHECK_LOG.relative_to(ROOT)}", flush=True)
        try:
            tests = pytest("-m", "not alone")
        except KeyboardInterrupt:
            finish(check)
            raise
        print("pytest done; waiting for the course check", flush=True)
        checked = finish(check)
    print(CHECK_LOG.read_text(encoding="utf-8"), end="", flush=True)
    print(f"pytest and the course check took {time.monotonic() - start:.0f} s", flush=True)
    return tests, checked


def chapters_under_nbval() -> int:
    """The chapters under nbval, kept in the book's execution cache (what ``book/build.py`` would run); exit status."""
    start = time.monotonic()
    code = run(nbval_book.command([ROOT / "notebooks"]))
    print(f"the chapters under nbval took {time.monotonic() - start:.0f} s", flush=True)
    if code == NO_TESTS_COLLECTED:
        print("nbval collected no cells: failing", flush=True)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run the three parts; 0 when all passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-jobs", type=int, default=JOBS, help="gradings the course check runs at once")
    parser.add_argument("--check-budget", type=float, default=BUDGET_S, help="seconds of grading per assignment")
    args = parser.parse_args(argv)
    store = [sys.executable, "-m", "autograder", "store", "--check"]
    codes = run_at_once({
        "release --check": ([sys.executable, "-m", "autograder", "release", "--check"], {}),
        "store --check": (store, {}),
        "store --check as on another CPU": (store, OTHER_CPU),
        "ruff check": ([sys.executable, "-m", "ruff", "check", "."], {}),
    })
    codes["pytest"], codes["course check"] = pytest_beside_check(args.check_jobs, args.check_budget)
    codes["chapters under nbval"] = chapters_under_nbval()
    codes["pytest -m alone"] = pytest("-m", "alone and not load")
    failed = [name for name, code in codes.items() if code != 0]
    print(f"FAILED: {', '.join(failed)}" if failed else "all parts passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
