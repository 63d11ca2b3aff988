"""Build the chapters into a static site: ``python book/build.py`` (what ``make book`` runs).

    python book/build.py                      # -> _build/book/index.html
    python book/build.py --out DIR --fresh    # another output directory; re-run every chapter

Sphinx (MyST-NB, sphinx-book-theme, configured in ``book/conf.py``) reads a staged source
directory beside the output (``<out>_src``: the home page ``book/index.md`` and a link to the
chapters directory) and keeps its environment in ``<out>_doctrees``. Every chapter is executed
once per build in the chapters directory; a later build re-executes only the chapters that
changed, unless ``--fresh``. A cell that raises or exceeds the per-cell timeout fails the build
(exit status 1) with the notebook's path, the cell's source and its traceback.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
DEFAULT_OUT = ROOT / "_build" / "book"


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
    """Build the site into ``out``; returns Sphinx's exit status (0 when every chapter ran).

    ``cell_timeout`` (seconds) replaces ``nb_execution_timeout`` of ``book/conf.py``.
    """
    from sphinx.cmd.build import build_main

    out = out.resolve()
    src, doctrees = out.with_name(out.name + "_src"), out.with_name(out.name + "_doctrees")
    stage(src, chapters)
    args = ["-b", "html", "-c", str(BOOK), "-d", str(doctrees), "-T", "-W", "--keep-going"]
    if fresh:
        args.append("-E")
    if cell_timeout is not None:
        args += ["-D", f"nb_execution_timeout={cell_timeout}"]
    return build_main([*args, str(src), str(out)])


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
