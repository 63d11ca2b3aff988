"""Build the chapters into a static site: ``python book/build.py`` (what ``make book`` runs).

    python book/build.py                      # -> _build/book/index.html
    python book/build.py --out DIR --fresh    # another output directory; re-run every chapter

The chapters are stored without outputs (but for the few cells whose printed figures nbval
compares). Their outputs come from nbval's run of them (``book/nbval_book.py``, the pytest
plugin that keeps each chapter that passed in the book's execution cache, jupyter-cache):
``make test`` runs the chapters so, and this build reuses that run. It first asks the cache
for every chapter; the ones it lacks (their code, or ``helpers/`` or ``requirements-lock.txt``,
changed since: see :func:`nbval_book.cache_dir`) run under nbval, ``--jobs`` at once, and a
cell that raises, times out or prints other than the chapter's committed output fails the
build (exit status 1) with nbval's report, which names the notebook and the cell and shows its
source and traceback. Sphinx (MyST-NB in its ``cache`` execution mode, sphinx-book-theme,
configured in ``book/conf.py``) then renders the chapters with the cached outputs from a staged
source directory beside the output (``<out>_src``: links to the home page ``book/index.md`` and
to ``notebooks/NN_*.ipynb``), keeping its environment in ``<out>_doctrees``; any Sphinx warning
fails the build too. A chapter whose text alone changed needs no new run.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

BOOK = Path(__file__).resolve().parent
sys.path.insert(0, str(BOOK))  # nbval_book, also when this file is run with runpy
from nbval_book import CELL_TIMEOUT_S, DEFAULT_CACHE, cache_dir, inputs_key, run_nbval  # noqa: E402

ROOT = BOOK.parent
DEFAULT_OUT = ROOT / "_build" / "book"


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


def stage(src: Path, chapters: list[Path]) -> None:
    """The source Sphinx reads: links to the home page and, in ``notebooks/``, to the chapters."""
    src.mkdir(parents=True, exist_ok=True)
    _link(src / "index.md", BOOK / "index.md")
    staged = src / "notebooks"
    if staged.is_symlink():  # the layout of earlier builds linked the chapters' directory
        staged.unlink()
    staged.mkdir(exist_ok=True)
    names = {path.name for path in chapters}
    for old in staged.iterdir():
        if old.name not in names:  # a chapter renamed or removed since the last build
            _remove(old)
    for path in chapters:
        _link(staged / path.name, path.resolve())


def not_cached(chapters: list[Path], folder: Path) -> list[Path]:
    """The chapters whose code the jupyter-cache ``folder`` holds no passing run of."""
    import nbformat
    from jupyter_cache import get_cache

    if not (folder / "global.db").is_file():
        return list(chapters)
    cache = get_cache(folder)

    def cached(path: Path) -> bool:
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            return False
        return True
    return [path for path in chapters if not cached(path)]


def build(out: Path = DEFAULT_OUT, chapters: Path = ROOT / "notebooks", fresh: bool = False,
          cell_timeout: int = CELL_TIMEOUT_S, jobs: int = 2, cache_root: Path = DEFAULT_CACHE) -> int:
    """Build the site into ``out``; returns 0 when every chapter passed nbval and Sphinx gave no warning.

    ``cell_timeout`` is in seconds; ``jobs`` chapters run at once; ``cache_root`` holds the
    execution cache (one jupyter-cache folder per state of ``helpers/``).
    """
    out, cache_root = out.resolve(), cache_root.resolve()
    src, doctrees = out.with_name(out.name + "_src"), out.with_name(out.name + "_doctrees")
    paths = sorted(chapters.resolve().glob("[0-9][0-9]_*.ipynb"))
    stage(src, paths)
    key = inputs_key()
    folder = cache_dir(cache_root, key)
    missing = list(paths) if fresh else not_cached(paths, folder)
    print(f"execution cache {folder}: {len(paths) - len(missing)} of {len(paths)} chapter(s) found", flush=True)
    if missing:
        print(f"not in the execution cache, so run under nbval: {' '.join(p.name for p in missing)}", flush=True)
    if missing and run_nbval(missing, cache_root, cell_timeout, jobs) != 0:
        print("\nbook not built: a chapter failed under nbval (its report is above)", file=sys.stderr)
        return 1
    lost = not_cached(paths, folder)
    if lost or inputs_key() != key:  # helpers/ changed while the chapters ran: their outputs are of neither state
        print(f"book not built: helpers/ changed during the build ({', '.join(p.name for p in lost)} not kept); "
              "build again", file=sys.stderr)
        return 1
    from sphinx.application import Sphinx

    overrides = {"nb_execution_cache_path": str(folder)}  # the folder the chapters' runs were kept in
    app = Sphinx(src, BOOK, out, doctrees, "html", confoverrides=overrides, freshenv=fresh,
                 warningiserror=True, keep_going=True)
    app.build()
    return app.statuscode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory (default _build/book)")
    parser.add_argument("--chapters", type=Path, default=ROOT / "notebooks",
                        help="directory holding the chapters NN_*.ipynb (default notebooks/)")
    parser.add_argument("--fresh", action="store_true",
                        help="ignore the execution cache and the saved environment: run every chapter")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"the execution cache's directory (default {DEFAULT_CACHE.relative_to(ROOT)})")
    parser.add_argument("--cell-timeout", type=int, metavar="SECONDS", default=CELL_TIMEOUT_S,
                        help=f"seconds a cell may run (default {CELL_TIMEOUT_S})")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="chapters run at once (default: 2, or 1 on a one-core machine)")
    args = parser.parse_args(argv)
    start = time.monotonic()
    status = build(args.out, args.chapters, args.fresh, args.cell_timeout, args.jobs, args.cache)
    verdict = "built" if status == 0 else "FAILED"
    print(f"book {verdict} in {time.monotonic() - start:.1f} s: {args.out.resolve() / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
