"""The chapters under nbval, and nbval's run of them kept for the book: a pytest plugin.

    python -m pytest -p book.nbval_book --nbval-lax notebooks [-n 2 --dist loadfile]   # in the course's root

(``tests/suite.py`` runs it so in ``make test``; ``book/build.py`` runs it for the chapters the
book's execution cache lacks.) nbval runs each chapter's code cells in order in one kernel: a
cell that raises fails, and so does a cell tagged ``nbval-check-output`` whose output differs
from the one committed with the chapter. This plugin adds two things.

* **Warm kernels.** In the course repository the kernels are forked from the graders' warm
  template (:mod:`autograder.warm_kernels`, without the graders' sandbox: the chapters are
  course content), whose forkserver the chapters' ranks are forked from too: each chapter then
  skips importing torch and starting its own forkserver (about 4 s each on the 2-core machine).
  The process running the chapters is a child subreaper while they run, and every process
  they leave is ended when the session ends. Where a process runs fewer than
  :data:`WARM_FROM_CHAPTERS` chapters, or without ``autograder`` (a student's copy), nbval
  starts its kernels itself.
* **The record.** A chapter whose every cell passed is stored in the book's execution cache,
  jupyter-cache, which MyST-NB reads (``nb_execution_mode = "cache"`` in ``book/conf.py``),
  with the outputs JupyterLab would have shown, rebuilt from the kernel messages nbval read (nbval
  itself also keeps what an explorer's output widget captured and what ``clear_output``
  removed). jupyter-cache matches a notebook by its code cells, so a chapter whose text alone
  changed needs no new run; what the chapters import is keyed by the folder: :func:`cache_dir`
  names it by a hash of the contents of ``helpers/`` (the code *and* the stored results that
  ``python -m autograder store`` writes) and of ``requirements-lock.txt``. A chapter is not
  stored if those changed while it ran.

``--book-accept`` writes what the tagged cells printed into the chapter as their expected output
(after a deliberate change of a figure the text cites: check the text too); ``--book-cold-kernels``
leaves the kernels to nbval; ``--book-cache none`` keeps nothing.
"""
from __future__ import annotations

import copy
import functools
import hashlib
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / "_build" / "jupyter_cache"
# What a chapter's outputs depend on besides its own cells: the student package (helper code
# and the stored results the chapters read) and the pinned environment.
INPUTS = ("helpers", "requirements-lock.txt")
SKIPPED = ("__pycache__", ".ipynb_checkpoints")
CELL_TIMEOUT_S = 300  # per cell; a whole chapter runs in 2-11 s on the idle 2-core machine
KEPT_GENERATIONS = 3  # cache folders kept: the current inputs' and two earlier ones (switching branches back)
CHECK_TAG = "nbval-check-output"  # nbval's metadata tag for "compare this cell's output"
OUTPUTS_DIFFER = "Cell outputs differ"  # nbval's message when a checked cell printed otherwise
# Starting the warm template and its forkserver costs about 5 s; a chapter in a kernel forked
# from it starts about 4 s sooner (2-core machine): worth it from 2 chapters per process.
WARM_FROM_CHAPTERS = 2


def inputs_key(root: Path = ROOT) -> str:
    """A hash of the contents of :data:`INPUTS` below ``root`` (names and bytes, in order)."""
    digest = hashlib.sha256()
    for name in INPUTS:
        top = root / name
        files = [top] if top.is_file() else sorted(
            path for path in top.rglob("*")
            if path.is_file() and not any(part in SKIPPED or part.endswith(".pyc") for part in path.parts))
        for path in files:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def cache_dir(cache_root: Path = DEFAULT_CACHE, key: str | None = None) -> Path:
    """The jupyter-cache folder for the current (or ``key``'s) inputs: ``cache_root/<key>``."""
    return Path(cache_root) / (key or inputs_key())


def prune(cache_root: Path, keep: Path) -> None:
    """Remove the cache folders of all but the :data:`KEPT_GENERATIONS` newest inputs (never ``keep``)."""
    if not Path(cache_root).is_dir():
        return
    folders = sorted((p for p in Path(cache_root).iterdir() if p.is_dir() and p != keep),
                     key=lambda p: p.stat().st_mtime, reverse=True)
    for old in folders[KEPT_GENERATIONS - 1:]:
        shutil.rmtree(old, ignore_errors=True)


def command(paths: list[Path], cache_root: Path = DEFAULT_CACHE, cell_timeout: float = CELL_TIMEOUT_S,
            jobs: int = 2, color: bool | None = None) -> list[str]:
    """The pytest command that runs the chapters ``paths`` (or the folders of them) under nbval, ``jobs``
    at once, keeping each that passes in the cache below ``cache_root``. Run it in the course's root.
    ``color``: its report in colour (default: if this process's output is a terminal)."""
    chapters = sum(len(list(Path(p).glob("*.ipynb"))) if Path(p).is_dir() else 1 for p in paths)
    color = sys.stdout.isatty() if color is None else color
    argv = [sys.executable, "-m", "pytest", "-p", "book.nbval_book", "-p", "no:cacheprovider", "--nbval-lax",
            "--nbval-cell-timeout", f"{cell_timeout:g}", "--book-cache", str(cache_root), "-q", "--no-header",
            "-r", "fE", f"--color={'yes' if color else 'no'}"]  # nbval colours unless told "no"
    if jobs > 1 and chapters > 1:
        argv += ["-n", str(min(jobs, chapters)), "--dist", "loadfile"]  # a chapter's cells on one worker
    return [*argv, *map(str, paths)]


def run_nbval(paths: list[Path], cache_root: Path = DEFAULT_CACHE, cell_timeout: float = CELL_TIMEOUT_S,
              jobs: int = 2) -> int:
    """Run :func:`command` in the course's root, its report on this terminal; pytest's exit status."""
    return subprocess.run(command(paths, cache_root, cell_timeout, jobs), cwd=ROOT).returncode


# --- the plugin -----------------------------------------------------------------------------


def pytest_addoption(parser) -> None:
    group = parser.getgroup("nbval_book", "the chapters for the course book")
    group.addoption("--book-cache", type=Path, default=DEFAULT_CACHE, metavar="DIR",
                    help="keep each chapter that passed in the jupyter-cache DIR/<inputs key> "
                         f"(default {DEFAULT_CACHE.relative_to(ROOT)}); 'none': keep nothing")
    group.addoption("--book-cold-kernels", action="store_true",
                    help="start every kernel the usual way (nbval's own), not from the warm template")
    group.addoption("--book-accept", action="store_true",
                    help=f"write what the cells tagged {CHECK_TAG} printed into the chapter as their expected "
                         "output (when no cell of the chapter raised)")


def _nbval_on(config) -> bool:
    return bool(config.getoption("nbval", False) or config.getoption("nbval_lax", False))


def pytest_configure(config) -> None:
    if not _nbval_on(config):
        return
    record = Record(config)
    config.pluginmanager.register(record, "nbval_book_record")
    if not config.getoption("book_cold_kernels") and not _is_xdist_controller(config):
        config.pluginmanager.register(WarmKernels(), "nbval_book_warm")


def _is_xdist_controller(config) -> bool:
    """Whether this process only hands tests to xdist's workers (it then starts no kernel)."""
    return not hasattr(config, "workerinput") and (config.getoption("numprocesses", None) or 0) > 0


class Record:
    """The outputs of each chapter's cells, from the messages nbval read; each chapter that passed, into the cache."""

    def __init__(self, config) -> None:
        root = config.getoption("book_cache")
        self.key = inputs_key()
        self.folder = None if str(root) == "none" else cache_dir(root, self.key)
        self.fronts: dict[str, FrontEnd] = {}  # chapter's node id -> what a front end shows of it
        self.failed: set[str] = set()  # chapters with a cell that failed (raised, timed out or printed otherwise)
        self.raised: set[str] = set()  # chapters with a cell that failed other than by its output
        self.accept = config.getoption("book_accept")
        if self.folder is not None and not hasattr(config, "workerinput"):
            # Created here, before any xdist worker starts: two workers creating it at once could collide.
            from jupyter_cache import get_cache
            self.folder.mkdir(parents=True, exist_ok=True)
            get_cache(self.folder).db  # noqa: B018  (creates the database)
            prune(root, self.folder)

    @staticmethod
    def _chapter(item):
        from nbval.plugin import IPyNbCell
        return item.parent if isinstance(item, IPyNbCell) else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        chapter = self._chapter(item)
        if chapter is None:
            return (yield)
        front = self.fronts.get(chapter.nodeid)
        if front is None:
            front = self.fronts[chapter.nodeid] = FrontEnd(chapter)
        front.messages.clear()
        try:
            return (yield)
        finally:
            front.cell_ran(item.cell_num)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        chapter = self._chapter(item)
        if chapter is not None and (report.failed or hasattr(report, "wasxfail")):
            self.failed.add(chapter.nodeid)
            if call.excinfo is None or str(call.excinfo.value) != OUTPUTS_DIFFER:
                self.raised.add(chapter.nodeid)
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        result = yield
        chapter = self._chapter(item)
        if chapter is not None and (nextitem is None or nextitem.parent is not chapter):
            self.store(chapter)  # its last cell: nbval has stopped its kernel
        return result

    def store(self, chapter) -> None:
        front = self.fronts.pop(chapter.nodeid, None)
        if front is not None and self.accept and chapter.nodeid not in self.raised:
            accept(chapter.path, front.outputs)
        if self.folder is None or front is None or chapter.nodeid in self.failed:
            return
        if inputs_key() != self.key:
            warnings.warn(f"{chapter.path.name} not kept for the book: helpers/ changed while it ran", stacklevel=1)
            return
        from jupyter_cache import get_cache
        from jupyter_cache.base import CacheBundleIn

        nb = executed(chapter.nb, front.outputs)
        get_cache(self.folder).cache_notebook_bundle(
            CacheBundleIn(nb, str(chapter.path), data={"execution_seconds": time.monotonic() - front.started,
                                                        "runner": "nbval"}),
            check_validity=True, overwrite=True)


class FrontEnd:
    """What JupyterLab would show of a chapter nbval runs, from the iopub messages nbval reads.

    nbval keeps every output of a cell, also those an output widget captures (an explorer's
    figures, each time it redraws) and those a ``clear_output`` removes; a front end shows the
    former in the widget, which the book replaces by a note, and the latter not at all.
    """

    def __init__(self, chapter) -> None:
        self.messages: list[dict] = []  # read while the current cell ran
        self.outputs: dict[int, list] = {}  # code cell number -> outputs
        self.widgets: dict[str, str] = {}  # output widget's comm id -> the request it captures ("": none)
        self.started = time.monotonic()
        read = chapter.get_kernel_message

        def get_kernel_message(timeout=None, stream="iopub"):  # noqa: ANN001, ANN202
            msg = read(timeout=timeout, stream=stream)
            if stream == "iopub":
                self.messages.append(msg)
            return msg
        chapter.get_kernel_message = get_kernel_message

    def cell_ran(self, number: int) -> None:
        """The outputs of code cell ``number`` from the messages read while it ran (nbval stops at its idle)."""
        done = [m for m in self.messages if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"]
        request = done[-1]["parent_header"].get("msg_id") if done else None
        outputs, clear_first = [], False
        for msg in self.messages:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "comm_open" and content.get("data", {}).get("state", {}).get("_model_name") == "OutputModel":
                self.widgets[content["comm_id"]] = ""
            elif kind == "comm_msg" and content.get("comm_id") in self.widgets:
                state = content.get("data", {}).get("state", {})
                if "msg_id" in state:
                    self.widgets[content["comm_id"]] = state["msg_id"] or ""
            parent = msg["parent_header"].get("msg_id")
            if parent != request or parent in self.widgets.values():
                continue
            if kind == "clear_output":
                outputs, clear_first = (outputs, True) if content.get("wait") else ([], False)
            elif kind in ("stream", "display_data", "execute_result", "error"):
                if clear_first:
                    outputs, clear_first = [], False
                outputs.append(nbformat.v4.output_from_msg(msg))
        self.outputs[number] = outputs
        self.messages.clear()


def accept(path: Path, outputs: dict[int, list]) -> list[int]:
    """Write ``outputs`` of the code cells tagged :data:`CHECK_TAG` into the chapter at ``path`` as their
    expected output (streams joined, numbered as in a run from the top); the numbers of the cells changed."""
    nb = nbformat.read(path, as_version=4)  # read now: the file may have changed since nbval read it
    changed = []
    for number, cell in enumerate(cell for cell in nb.cells if cell.cell_type == "code"):
        if CHECK_TAG not in cell.metadata.get("tags", []):
            continue
        expected = joined_streams(outputs.get(number, []))
        for out in expected:
            if out.output_type == "execute_result":
                out.execution_count = number + 1
        if cell.outputs != expected or cell.execution_count != number + 1:
            cell.outputs, cell.execution_count = expected, number + 1
            changed.append(number)
    if changed:
        write_like(nb, path)
        # A warning, which pytest shows in its summary (also from xdist's workers), unlike a print.
        warnings.warn(f"{path.name}: expected output written for code cell(s) {changed}", stacklevel=1)
    return changed


def write_like(nb, path: Path) -> None:
    """Write ``nb`` to ``path`` in the layout of the file there (a cell's source as one string or as lines)."""
    one_string = '"source": "' in path.read_text(encoding="utf-8")
    nbformat.write(nb, str(path), split_lines=not one_string)


def joined_streams(outputs: list) -> list:
    """``outputs`` with each run of stream outputs of one name joined into one."""
    joined = []
    for out in copy.deepcopy(outputs):
        last = joined[-1] if joined else None
        if last is not None and out.output_type == last.output_type == "stream" and out.name == last.name:
            last.text += out.text
        else:
            joined.append(out)
    return joined


def executed(nb, outputs: dict[int, list]):
    """A copy of ``nb`` whose code cells hold ``outputs`` (by code cell number) and run numbers 1, 2, ..."""
    nb = copy.deepcopy(nb)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for number, cell in enumerate(code):
        cell.execution_count = number + 1
        cell.outputs = outputs.get(number, [])
        for out in cell.outputs:
            if out.output_type == "execute_result":
                out.execution_count = number + 1
    nbformat.validate(nb)
    return nb


class WarmKernels:
    """nbval's kernels forked from the graders' warm template (see the module docstring)."""

    def __init__(self) -> None:
        self.processes = None  # autograder.processes.Descendants, once a kernel was started
        self.template = None
        self.original = None  # nbval's start_new_kernel, while this one replaces it

    def pytest_collection_finish(self, session) -> None:
        """Warm kernels where this process runs :data:`WARM_FROM_CHAPTERS` chapters or more."""
        from nbval.plugin import IPyNbCell
        import nbval.kernel

        chapters = {item.parent for item in session.items if isinstance(item, IPyNbCell)}
        workers = getattr(session.config, "workerinput", {}).get("workercount", 1)
        if len(chapters) >= WARM_FROM_CHAPTERS * workers:
            self.original = nbval.kernel.start_new_kernel
            nbval.kernel.start_new_kernel = self.start_new_kernel

    def pytest_sessionfinish(self, session) -> None:
        import nbval.kernel
        if self.original is not None:
            nbval.kernel.start_new_kernel, self.original = self.original, None
        if self.processes is not None:
            from autograder.processes import become_subreaper
            if self.template is not None:
                self.template.close()
            self.processes.end()
            become_subreaper(False)
            self.processes = self.template = None

    def _warm(self):
        """The template (started on first use), or None: without ``autograder`` or where it cannot start."""
        if self.processes is None:
            try:
                from autograder.processes import Descendants
                from autograder.warm_kernels import start_template
            except ImportError:  # a student's copy: no grader, so nbval's own kernels
                return None
            self.processes = Descendants()  # the subreaper that kernels forked from the template need
            self.template = start_template("off")
        return self.template

    def start_new_kernel(self, startup_timeout: float = 60, kernel_name: str = "python", **kwargs):
        """nbval's :func:`nbval.kernel.start_new_kernel`, with a kernel forked from the template."""
        if self._warm() is None:
            return self.original(startup_timeout=startup_timeout, kernel_name=kernel_name, **kwargs)
        from nbval.kernel import NbvalKernelspecManager
        from traitlets.config import Config

        manager = blocking_warm_manager()(kernel_name=kernel_name, kernel_spec_manager=NbvalKernelspecManager(),
                                          config=Config({"WarmKernelManager": {"sandbox": "off"}}))
        manager.start_kernel(**kwargs)
        client = manager.client()
        client.start_channels()
        try:
            client.wait_for_ready(timeout=startup_timeout)
        except RuntimeError:
            client.stop_channels()
            manager.shutdown_kernel()
            raise
        return manager, client


@functools.cache
def blocking_warm_manager() -> type:
    """:class:`autograder.warm_kernels.WarmKernelManager` with jupyter's blocking API, which nbval uses."""
    from jupyter_client.blocking import BlockingKernelClient
    from jupyter_client.client import KernelClient
    from jupyter_client.manager import KernelManager
    from traitlets import DottedObjectName, Type

    from autograder.warm_kernels import WarmKernelManager

    blocking = {name: getattr(KernelManager, name) for name in (
        "start_kernel", "pre_start_kernel", "post_start_kernel", "_launch_kernel", "request_shutdown",
        "finish_shutdown", "cleanup_resources", "shutdown_kernel", "restart_kernel", "_send_kernel_sigterm",
        "_kill_kernel", "interrupt_kernel", "signal_kernel", "is_alive")}
    return type("BlockingWarmKernelManager", (WarmKernelManager,), {
        **blocking,
        "client_class": DottedObjectName("jupyter_client.blocking.BlockingKernelClient"),
        "client_factory": Type(BlockingKernelClient, klass=KernelClient),
        "__doc__": blocking_warm_manager.__doc__,
    })

