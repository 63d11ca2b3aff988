"""The whole test suite, as ``make test`` (and so CI) runs it.

    python tests/suite.py [--check-jobs N] [--check-budget SECONDS]

1. ``autograder release --check`` and ``autograder store --check``, the latter also as on
   another CPU (:data:`OTHER_CPU`: torch's portable kernels, MKL's compatible paths, one
   thread), and the linter, ``ruff check`` (configured in ``pyproject.toml``), at once (about
   a minute);
2. pytest, all but the tests marked ``alone``, and beside it the course check (``autograder
   check``) as on another CPU (:data:`OTHER_CPU`: hidden tests' verdicts must not depend on the
   CPU; the machine's own settings are pytest's), then, once the check has ended, the chapters
   under nbval: pytest waits on browsers, kernels and time limits much of the time, and the
   others fill the cores meanwhile. The chapters never run beside the check (their gloo groups
   slow down many times beside it); they run under ``--nbval-lax`` (a cell that raises fails,
   and so does a cell tagged ``nbval-check-output`` that prints other than the output committed
   with it), two at a time in warm kernels, keeping each chapter that passed in the book's
   execution cache (``book/nbval_book.py``). The check's and the chapters' reports go to
   ``_build/course-check.log`` and ``_build/chapters-nbval.log`` and are printed when all three
   have ended;
3. the tests marked ``alone``: the book, built from that cache without running a chapter
   again, in the browser. Not the load test (marked ``load``, ``pytest -m load``): the course
   check in 2 grades every source twice under more load than its spinning processes and
   requires full marks and equal scores.

Exit status 0 only when every part passed; pytest's exit code 5 (no tests collected) is a
failure, for nbval's too. A ^C reaches every part (they share the terminal's process group);
this script waits for them to stop, and starts no other.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autograder.check import BUDGET_S, JOBS  # noqa: E402
from autograder.store import OTHER_CPU  # noqa: E402  (stored results must hold as another CPU rounds, too)
sys.path.insert(0, str(ROOT / "book"))
import nbval_book  # noqa: E402  (the chapters under nbval, kept for the book)
CHECK_LOG = ROOT / "_build" / "course-check.log"
NBVAL_LOG = ROOT / "_build" / "chapters-nbval.log"
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


def pytest_command(*args: str) -> list[str]:
    """pytest on ``tests/`` with ``args``."""
    return [sys.executable, "-m", "pytest", "tests", "--durations=20", *args]


Queued = tuple[str, list[str], dict[str, str], Path]  # name, command, extra environment variables, log


def run_beside(command: list[str], queue: list[Queued]) -> tuple[int, dict[str, int]]:
    """Run ``command``, its output on this terminal, while the ``queue``'s commands run one after another
    beside it, each with its output in its log; its exit status, and each queued command's by name once all
    have ended. The logs are printed at the end."""
    stopping = threading.Event()  # set on ^C: no queued command starts after it

    def one_after_another() -> dict[str, int]:
        codes = {}
        for name, queued, extra, log in queue:
            if stopping.is_set():
                break
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "w", encoding="utf-8") as out:
                codes[name] = finish(subprocess.Popen(queued, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                                      env={**os.environ, **extra}))
            print(f"\n{name} ended (exit status {codes[name]}); its report: {log}", flush=True)
        return codes

    with ThreadPoolExecutor(1) as pool:
        beside = pool.submit(one_after_another)
        try:
            code = run(command)
            codes = beside.result()
        except KeyboardInterrupt:  # every command got it too; the pool waits for them to stop
            stopping.set()
            raise
    for _, _, _, log in queue:
        print(log.read_text(encoding="utf-8"), end="", flush=True)
    return code, codes


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
    start = time.monotonic()
    check = [sys.executable, "-m", "autograder", "check", "--jobs", str(args.check_jobs),
             "--budget", f"{args.check_budget:g}"]
    codes["pytest"], beside = run_beside(pytest_command("-m", "not alone"), [
        ("course check", check, OTHER_CPU, CHECK_LOG),
        ("chapters under nbval", nbval_book.command([ROOT / "notebooks"], color=False), {}, NBVAL_LOG)])
    codes.update(beside)
    print(f"pytest, the course check and the chapters under nbval took {time.monotonic() - start:.0f} s", flush=True)
    codes["pytest -m alone"] = run(pytest_command("-m", "alone and not load"))
    for name in ("pytest", "chapters under nbval", "pytest -m alone"):
        if codes.get(name) == NO_TESTS_COLLECTED:
            print(f"{name} collected no tests: failing", flush=True)
    failed = [name for name, code in codes.items() if code != 0]
    print(f"FAILED: {', '.join(failed)}" if failed else "all parts passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
