"""Build the chapters into a static site: ``python book/build.py`` (what ``make book`` runs).

    python book/build.py                      # -> _build/book/index.html
    python book/build.py --out DIR --fresh    # another output directory; re-run every chapter

The chapters are stored without outputs. The build first runs each chapter in the chapters
directory (as JupyterLab does), ``--jobs`` at once, in kernels forked from the graders' warm
template (:mod:`autograder.warm_kernels`) whose ranks share its forkserver, and writes the
executed copy into a staged source directory beside the output (``<out>_src``: the home page
``book/index.md`` and ``notebooks/NN_*.ipynb``). Sphinx (MyST-NB, sphinx-book-theme,
configured in ``book/conf.py``) then renders the staged copies and keeps its environment in
``<out>_doctrees``. A later build re-runs only the chapters changed since their staged copy,
or every chapter after a change in ``helpers/`` (all of them with ``--fresh``). A cell that
raises or exceeds the per-cell timeout fails the build (exit status 1) with the notebook's
path, the cell's number and source and its traceback; so does any Sphinx warning.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
from traitlets.config import Config

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
DEFAULT_OUT = ROOT / "_build" / "book"
# Starting the warm template and the forkserver costs about 5 s and saves about 1.5 s per kernel.
WARM_FROM_CHAPTERS = 4
CELL_TIMEOUT_S = 300  # per cell; a whole chapter runs in 6-15 s on the idle 2-core machine
# The chapters are course content, not student code: no sandbox (they may read helpers/stored).
TRUSTED = Config({"WarmKernelManager": {"sandbox": "off"}})
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours in IPython tracebacks


def _link(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target``, replacing whatever was there."""
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    _remove(link)
    link.symlink_to(target)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def stage(src: Path, chapters: list[Path]) -> Path:
    """The source Sphinx reads: a link to the home page and a directory for the executed chapters; that directory."""
    src.mkdir(parents=True, exist_ok=True)
    _link(src / "index.md", BOOK / "index.md")
    staged = src / "notebooks"
    if staged.is_symlink():  # the layout of earlier builds linked the chapters themselves
        staged.unlink()
    staged.mkdir(exist_ok=True)
    names = {path.name for path in chapters}
    for old in staged.iterdir():
        if old.name not in names:  # a chapter renamed or removed since the last build
            _remove(old)
    return staged


def chapters_to_run(chapters: list[Path], staged: Path, fresh: bool) -> list[Path]:
    """The chapters without an executed copy in ``staged`` newer than both the chapter and ``helpers/``.

    All of them when ``fresh``. A change to any helper module re-runs every chapter, since
    the chapters' outputs and figures come from the helpers.
    """
    helpers = max(path.stat().st_mtime for path in (ROOT / "helpers").rglob("*.py"))

    def stale(path: Path) -> bool:
        copy = staged / path.name
        return fresh or not copy.exists() or copy.stat().st_mtime < max(path.stat().st_mtime, helpers)
    return [path for path in chapters if stale(path)]


def run_chapters(chapters: list[Path], staged: Path, cell_timeout: int, jobs: int) -> list[str]:
    """Execute ``chapters`` into ``staged``, ``jobs`` at once; the report of each one that failed.

    In the course repository, from ``WARM_FROM_CHAPTERS`` chapters on, the kernels are forked
    from a warm template and their ranks from its forkserver, as a grader's are
    (:mod:`autograder.warm_kernels`; without the graders' sandbox: the chapters are trusted),
    and every process they leave is ended. A student's copy has no ``autograder``: there, jupyter's own
    kernels run one chapter at a time (pyzmq's asyncio client can miss a reply when two
    kernels are busy at once, which :class:`autograder.warm_kernels.WakefulChannel` works around).
    """
    if not chapters:
        return []
    try:
        from autograder.processes import Descendants
        from autograder.warm_kernels import WarmKernelManager, start_template
    except ImportError:
        print("autograder/ not found (a student's copy): jupyter's own kernels, one chapter at a time", flush=True)
        return _failures(asyncio.run(_run_all(chapters, staged, cell_timeout, 1, AsyncKernelManager)))
    if len(chapters) < WARM_FROM_CHAPTERS:  # not a subreaper: WarmKernelManager starts kernels the usual way
        return _failures(asyncio.run(_run_all(chapters, staged, cell_timeout, jobs, WarmKernelManager)))
    processes = Descendants()  # also makes this process the subreaper forked kernels need
    start_template("off")  # with the forkserver the kernels' ranks are forked from
    try:
        return _failures(asyncio.run(_run_all(chapters, staged, cell_timeout, jobs, WarmKernelManager)))
    finally:
        processes.end()


def _failures(reports: list[str | None]) -> list[str]:
    return [report for report in reports if report]


async def _run_all(chapters: list[Path], staged: Path, cell_timeout: int, jobs: int,
                   manager: type[AsyncKernelManager]) -> list[str | None]:
    running = asyncio.Semaphore(jobs)

    async def run(path: Path) -> str | None:
        async with running:
            return await _run_chapter(path, staged, cell_timeout, manager)
    return await asyncio.gather(*(run(path) for path in chapters))


class ChapterClient(NotebookClient):
    """nbclient's notebook client, remembering which cell runs (for the report of a failure)."""

    cell = 0  # index of the cell running now

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):  # noqa: ANN001
        self.cell = cell_index
        return await super().async_execute_cell(cell, cell_index, *args, **kwargs)


async def _run_chapter(path: Path, staged: Path, cell_timeout: int, manager: type[AsyncKernelManager]) -> str | None:
    """Execute one chapter into ``staged``; None, or the report of the cell that failed."""
    nb = nbformat.read(path, as_version=4)
    client = ChapterClient(nb, timeout=cell_timeout, kernel_manager_class=manager, config=TRUSTED,
                           resources={"metadata": {"path": str(path.parent)}})
    start = time.monotonic()
    try:
        await client.async_execute()
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
        return f"\nchapter failed: {path} (cell {client.cell + 1} of {len(nb.cells)})\n{ANSI.sub('', str(exc))}"
    nbformat.write(nb, staged / path.name)
    print(f"{path.name}: executed in {time.monotonic() - start:.1f} s", flush=True)
    return None


def build(out: Path = DEFAULT_OUT, chapters: Path = ROOT / "notebooks", fresh: bool = False,
          cell_timeout: int = CELL_TIMEOUT_S, jobs: int = 2) -> int:
    """Build the site into ``out``; returns 0 when every chapter ran and Sphinx gave no warning.

    ``cell_timeout`` is in seconds; ``jobs`` chapters run at once.
    """
    from sphinx.application import Sphinx

    out = out.resolve()
    src, doctrees = out.with_name(out.name + "_src"), out.with_name(out.name + "_doctrees")
    paths = sorted(chapters.glob("[0-9][0-9]_*.ipynb"))
    staged = stage(src, paths)
    failures = run_chapters(chapters_to_run(paths, staged, fresh), staged, cell_timeout, jobs)
    for report in failures:
        print(report, file=sys.stderr)
    if failures:
        return 1
    app = Sphinx(src, BOOK, out, doctrees, "html", freshenv=fresh, warningiserror=True, keep_going=True)
    app.build()
    return app.statuscode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default _build/book)")
    parser.add_argument("--chapters", type=Path, default=ROOT / "notebooks",
                        help="directory holding the chapters NN_*.ipynb (default notebooks/)")
    parser.add_argument("--fresh", action="store_true", help="ignore the saved environment: run every chapter")
    parser.add_argument("--cell-timeout", type=int, metavar="SECONDS", default=CELL_TIMEOUT_S,
                        help=f"seconds a cell may run (default {CELL_TIMEOUT_S})")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="chapters run at once (default: 2, or 1 on a one-core machine)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    status = build(args.out, args.chapters, args.fresh, args.cell_timeout, args.jobs)
    verdict = "built" if status == 0 else "FAILED"
    print(f"book {verdict} in {time.monotonic() - start:.1f} s: {args.out.resolve() / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
