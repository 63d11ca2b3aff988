"""The chapters under nbval and the book's execution cache (``book/nbval_book.py``, ``book/build.py``).

On tiny chapters, and on two cells of chapter 06: the cache's key follows ``helpers/`` (its
stored results too); a cell that raises or hangs fails the book's build with nbval's report
naming the notebook and the cell; a second build runs only the chapter whose code changed, and
none when only its text did; a stored result changed under a chapter fails the cell that prints
it, and ``--book-accept`` writes the new output as the expected one. The real chapters run
under nbval in the last stage of ``make test`` (``tests/suite.py``); ``tests/test_book.py``
builds the book from that run.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "book" / "build.py"
sys.path.insert(0, str(ROOT / "book"))
import nbval_book  # noqa: E402

TIMEOUT_S = 600  # a hang guard: each run below takes seconds
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours its tracebacks
KERNEL = {"name": "python3", "display_name": "Python 3", "language": "python"}


def _write_chapter(path: Path, code: str, title: str = "# 1. Tiny") -> None:
    """A chapter at ``path``: a title cell, ``x = 1``, then a cell running ``code``."""
    cells = [new_markdown_cell(f"{title}\n\n*About 1 minutes.*"), new_code_cell("x = 1"), new_code_cell(code)]
    nbformat.write(new_notebook(cells=cells, metadata={"kernelspec": KERNEL}), str(path))


def _build(out: Path, chapters: Path, *args: str) -> tuple[int, str]:
    """``book/build.py`` on ``chapters`` with a cache of its own; exit status and output without colours."""
    proc = subprocess.run([sys.executable, str(BUILD), "--out", str(out), "--chapters", str(chapters),
                           "--cache", str(out.parent / "cache"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    return proc.returncode, ANSI.sub("", proc.stdout + proc.stderr)


def test_the_cache_key_follows_helpers_their_stored_results_and_the_lock(tmp_path: Path) -> None:
    (tmp_path / "helpers" / "stored").mkdir(parents=True)
    (tmp_path / "helpers" / "lesson.py").write_text("X = 1\n")
    stored = tmp_path / "helpers" / "stored" / "06_layouts.json"
    stored.write_text('{"padding": 2}')
    (tmp_path / "requirements-lock.txt").write_text("torch==2.13.0\n")
    key = nbval_book.inputs_key(tmp_path)
    (tmp_path / "helpers" / "__pycache__").mkdir()
    (tmp_path / "helpers" / "__pycache__" / "lesson.cpython-311.pyc").write_bytes(b"compiled")
    assert nbval_book.inputs_key(tmp_path) == key  # what Python compiles does not count
    stored.write_text('{"padding": 3}')  # what `python -m autograder store` rewrites
    assert nbval_book.inputs_key(tmp_path) != key
    stored.write_text('{"padding": 2}')
    assert nbval_book.inputs_key(tmp_path) == key  # contents, not times
    (tmp_path / "requirements-lock.txt").write_text("torch==2.14.0\n")
    assert nbval_book.inputs_key(tmp_path) != key
    assert nbval_book.cache_dir(tmp_path / "cache", key) == tmp_path / "cache" / key


def test_failing_and_hanging_cells_fail_the_build(tmp_path: Path) -> None:
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    _write_chapter(chapters / "01_raises.ipynb", "raise RuntimeError('cell-fails-on-purpose')")
    # The outcome, not the build's duration: a cell timeout that did not work would let the
    # cell end after its 60 s sleep, and the build would pass.
    _write_chapter(chapters / "02_hangs.ipynb", "import time\ntime.sleep(60)")
    code, log = _build(tmp_path / "html", chapters, "--cell-timeout", "3")
    assert code == 1, log[-3000:]
    assert "01_raises.ipynb::Cell 1" in log and "02_hangs.ipynb::Cell 1" in log, log[-3000:]  # nbval's names
    assert "raise RuntimeError('cell-fails-on-purpose')" in log, log[-4000:]  # the cell's source
    assert "RuntimeError: cell-fails-on-purpose" in log  # and its error
    assert "Timeout of 3 seconds exceeded" in log and "time.sleep(60)" in log, log[-3000:]
    assert "book not built: a chapter failed under nbval" in log
    assert not (tmp_path / "html" / "index.html").exists()


def test_a_second_build_runs_only_the_chapter_whose_code_changed(tmp_path: Path) -> None:
    chapters, out = tmp_path / "chapters", tmp_path / "html"
    chapters.mkdir()
    _write_chapter(chapters / "01_first.ipynb", "print('first version')")
    _write_chapter(chapters / "02_other.ipynb", "print('unchanged')")
    code, log = _build(out, chapters)
    assert code == 0, log[-3000:]
    assert "0 of 2 chapter(s) found" in log and "run under nbval: 01_first.ipynb 02_other.ipynb\n" in log

    _write_chapter(chapters / "01_first.ipynb", "print('second version')")
    code, log = _build(out, chapters)
    assert code == 0, log[-3000:]
    assert "1 of 2 chapter(s) found" in log and "run under nbval: 01_first.ipynb\n" in log
    assert "second version" in (out / "notebooks" / "01_first.html").read_text()

    _write_chapter(chapters / "01_first.ipynb", "print('second version')", title="# 1. Retitled")  # text only
    code, log = _build(out, chapters)
    assert code == 0, log[-3000:]
    assert "2 of 2 chapter(s) found" in log and "run under nbval" not in log
    page = (out / "notebooks" / "01_first.html").read_text()
    assert "Retitled" in page and "second version" in page


def test_a_changed_stored_result_fails_the_cell_that_prints_it(tmp_path: Path) -> None:
    """Chapter 06's first cells against a copy of helpers/ whose stored layouts say padding 3 for N = 3 (the
    chapter's text, and its committed output, say 2); ``--book-accept`` then writes what the cell printed."""
    copy = tmp_path / "course"
    shutil.copytree(ROOT / "helpers", copy / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    stored = copy / "helpers" / "stored" / "06_layouts.json"
    layouts = json.loads(stored.read_text())
    assert layouts["layouts"][1]["world_size"] == 3 and layouts["layouts"][1]["padding"] == 2
    layouts["layouts"][1]["padding"] = 3
    stored.write_text(json.dumps(layouts))

    chapter = nbformat.read(ROOT / "notebooks" / "06_gradient_sharding.ipynb", as_version=4)
    imports, layout_cell = [cell for cell in chapter.cells if cell.cell_type == "code"][:2]
    assert nbval_book.CHECK_TAG in layout_cell.metadata.get("tags", []), "chapter 06's cell 1 is no longer compared"
    assert "padding 2 element(s)" in layout_cell.outputs[0].text
    path = tmp_path / "06_gradient_sharding.ipynb"
    nbformat.write(new_notebook(cells=[new_code_cell(f"import sys\nsys.path.insert(0, {str(copy)!r})"),
                                       imports, layout_cell], metadata=chapter.metadata), str(path))
    command = [*nbval_book.command([path], cache_root=tmp_path / "cache", jobs=1), "--book-cold-kernels",
               "--book-accept"]  # cold: a warm kernel would have imported the course's own helpers
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    log = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 1, log[-3000:]
    assert "06_gradient_sharding.ipynb::Cell 2" in log and nbval_book.OUTPUTS_DIFFER in log, log[-3000:]
    assert "padding 3 element(" in log and "padding 2 element(" in log, log[-3000:]  # nbval's diff of the two
    assert not list((tmp_path / "cache").rglob("*.ipynb")), "a chapter that failed was kept for the book"
    accepted = [cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code"][2]
    assert "padding 3 element(s)" in accepted.outputs[0].text and accepted.execution_count == 3
