"""Build the chapters into a static site: ``python book/build.py`` (what ``make book`` runs).

    python book/build.py                      # -> _build/book/index.html
    python book/build.py --out DIR --fresh    # another output directory; re-run every chapter

Sphinx (MyST-NB, sphinx-book-theme, configured in ``book/conf.py``) reads a staged source
directory beside the output (``<out>_src``: the home page ``book/index.md`` and a link to the
chapters directory) and keeps its environment in ``<out>_doctrees``. Every chapter is executed
once per build in the chapters directory; a later build re-executes only the chapters that
changed (all of them after a failed build, a change of ``book/lessons.py`` or with ``--fresh``).
A cell that raises or exceeds the per-cell timeout fails the build (exit status 1) with the
notebook's path, the cell's source and its traceback; so does any Sphinx warning.
"""
from __future__ import annotations

import argparse
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
DEFAULT_OUT = ROOT / "_build" / "book"
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colours in IPython tracebacks


def _link(link: Path, target: Path) -> None:
    """Make ``link`` a symlink to ``target``, replacing whatever was there."""
    if link.is_symlink() and link.resolve() == target.resolve():
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.is_dir():
        shutil.rmtree(link)
    link.symlink_to(target)


def stage(src: Path, chapters: Path) -> None:
    """The source Sphinx reads: the home page and the chapters, linked, never copied."""
    src.mkdir(parents=True, exist_ok=True)
    _link(src / "index.md", BOOK / "index.md")
    _link(src / "notebooks", chapters.resolve())


def build(out: Path = DEFAULT_OUT, chapters: Path = ROOT / "notebooks", fresh: bool = False,
          cell_timeout: int | None = None) -> int:
    """Build the site into ``out``; returns 0 when every chapter ran and Sphinx gave no warning.

    ``cell_timeout`` (seconds) replaces ``nb_execution_timeout`` of ``book/conf.py``.
    """
    from sphinx.application import Sphinx

    out = out.resolve()
    src, doctrees = out.with_name(out.name + "_src"), out.with_name(out.name + "_doctrees")
    stage(src, chapters)
    overrides = {} if cell_timeout is None else {"nb_execution_timeout": cell_timeout}
    try:
        app = Sphinx(src, BOOK, out, doctrees, "html", confoverrides=overrides, freshenv=fresh,
                     warningiserror=True, keep_going=True)
        app.build()
        status = app.statuscode
    except Exception as exc:  # noqa: BLE001  (a failing chapter is reported, anything else raised)
        failure = failed_cell(exc, chapters)
        if failure is None:
            raise
        print(failure, file=sys.stderr)
        status = 1
    if status != 0:  # never reuse a failed build: the next one reads and runs every chapter again
        (doctrees / "environment.pickle").unlink(missing_ok=True)
    return status


def failed_cell(exc: BaseException, chapters: Path) -> str | None:
    """The report of a chapter cell that raised or timed out, if that is what ``exc`` is."""
    from myst_nb.core.execute import ExecutionError

    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ExecutionError):
        cause = cause.__cause__ or cause.__context__
    if cause is None:
        return None
    notebook = chapters / Path(str(cause)).name  # MyST-NB names the staged path
    message = ANSI.sub("", str(cause.__cause__))
    cells = nbformat.read(notebook, as_version=4).cells
    numbers = [i for i, c in enumerate(cells, 1)
               if c.cell_type == "code" and f"------------------\n{c.source}\n------------------" in message]
    where = f"cell {numbers[0]} of {len(cells)}" if numbers else "a cell"
    return f"\nchapter failed: {notebook} ({where})\n{message}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default _build/book)")
    parser.add_argument("--chapters", type=Path, default=ROOT / "notebooks",
                        help="directory holding the chapters NN_*.ipynb (default notebooks/)")
    parser.add_argument("--fresh", action="store_true", help="ignore the saved environment: run every chapter")
    parser.add_argument("--cell-timeout", type=int, metavar="SECONDS",
                        help="seconds a cell may run (default: nb_execution_timeout in book/conf.py)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    status = build(args.out, args.chapters, args.fresh, args.cell_timeout)
    verdict = "built" if status == 0 else "FAILED"
    print(f"book {verdict} in {time.monotonic() - start:.1f} s: {args.out.resolve() / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
