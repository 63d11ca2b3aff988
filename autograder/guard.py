"""nbgrader's Execute step, guarded: points come only from checks the student's code cannot rewrite.

:class:`GuardedExecute` replaces nbgrader's ``Execute`` in the course's autograde pipeline
(``autograder/nbgrader_config.py``), so ``nbgrader autograde`` and ``python -m autograder``
grade the same way. Around nbgrader's own cell-by-cell execution it adds three things:

1. **Refusal.** A student cell (a solution cell or any cell without a lock) whose code
   :func:`autograder.policy.refusal` rejects is not run; it gets an error output naming the
   line and the construct, and whatever it defined is missing when the tests run.
2. **Trusted names.** Before every test cell the notebook's locked import cell (grade_id
   ``imports``, restored from the gradebook by nbgrader) runs again, silently, so names like
   ``run`` or ``torch`` mean what the tests expect even if a student cell rebound them.
3. **Integrity.** After every cell :func:`autograder.integrity.check` runs through the
   kernel's ``user_expressions`` (no input transformer applies). If a cell changed a
   watched function, class method, transformer or hook, that cell's test (when it is one)
   and every later test cell score 0 with a message naming the cell and the change.

It also contains faults to the cell they happen in:

4. **Time limits.** Each cell has its own limit (:func:`autograder.budget.cell_limit`); a
   cell over it is interrupted and reported as "exceeded its time limit of N s".
5. **Kernel faults.** A kernel that dies in a cell, or does not answer the interrupt after
   a time limit, costs that cell: it gets a one-line error, a fresh kernel replays the
   earlier student and import cells, and grading goes on.
6. **stderr is shown, not scored.** nbgrader scores a test cell that wrote to stderr 0;
   what kernel-side code writes to stderr (a ``print(..., file=sys.stderr)``, a warning)
   becomes stdout lines prefixed ``[stderr]``, as output from ranks is shown prefixed
   ``[rank k]`` (:mod:`helpers.cluster`). Only errors cost points.
7. **Warm starts.** Kernels are forked from a template that has imported torch and ipykernel
   (:mod:`autograder.warm_kernels`), and their ranks from one forkserver the grader shares
   with every kernel (:func:`helpers.cluster.share_forkserver`): both once per grading
   process instead of once per kernel. No notebook code runs in either; a rank that kills
   the forkserver costs only speed (the next kernel starts its own). Tracebacks are IPython's
   ``Plain`` ones (each frame's line, no context lines): the default ones cost 20-40 ms each.
8. **Leftover processes.** Every process started below the grader during grading, even
   one started in a new session, is ended when grading ends (:mod:`autograder.processes`).
9. **Kernels that do not start.** A kernel that dies or does not answer before any notebook
   code ran is shut down and another one started, up to ``START_ATTEMPTS`` kernels, so a
   fault of the machine's (an overloaded moment, a port taken between jupyter choosing it and
   the kernel binding it) does not fail a whole grading.
"""
from __future__ import annotations

import ast
import os
import time
from contextlib import contextmanager
from typing import Iterator

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute

from helpers.cluster import SHARED_FORKSERVER_ENV, share_forkserver

from .budget import cell_limit
from .policy import imported_names, refusal
from .processes import Descendants, become_subreaper
from .warm_kernels import WarmKernelManager
from .warm_kernels import template as kernel_template

IMPORTS_GRADE_ID = "imports"
PROBE = "__import__('autograder.integrity', fromlist=['check']).check()"
PROBE_TIMEOUT_S = 60
START_ATTEMPTS = 3  # kernels tried before a grading gives up (each waits nbclient's startup_timeout)
INTERRUPT_REPLY_S = 20  # seconds an interrupted kernel may take to answer (ending its ranks, on a loaded machine)
TIME_LIMIT = "TimeLimitExceeded"
KERNEL_FAULT = "KernelFault"
GRADER_ERRORS = ("GradingRefused", TIME_LIMIT, KERNEL_FAULT)  # errors the grader itself writes
STDERR_PREFIX = "[stderr] "
CELL_SECONDS: dict[str, float] = {}  # grade_id -> wall seconds of the latest grading in this process


class GradingRefused(Exception):
    """The kernel's state can no longer be trusted for grading (the message says why)."""


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _meta(cell: NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


def _label(cell: NotebookNode, index: int) -> str:
    gid = _meta(cell).get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


def stderr_as_stdout(outputs: list[NotebookNode]) -> None:
    """Turn stderr stream outputs into stdout lines prefixed ``[stderr]``, in place."""
    for output in outputs:
        if output.output_type == "stream" and output.name == "stderr":
            output.name = "stdout"
            output.text = "".join(STDERR_PREFIX + line for line in output.text.splitlines(keepends=True))


def is_student_cell(cell: NotebookNode) -> bool:
    """Code a student wrote or may have edited: a solution cell, or any cell without a lock."""
    meta = _meta(cell)
    return cell.cell_type == "code" and (bool(meta.get("solution")) or not meta.get("locked"))


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` for the block only, so nothing leaks into the grader's later children."""
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` with refusal of tampering cells, trusted imports and integrity checks."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("kernel_manager_class", WarmKernelManager)  # kernels forked from a warm template
        super().__init__(*args, **kwargs)
        if not any(arg.startswith("--InteractiveShell.xmode") for arg in self.extra_arguments):
            # IPython's default tracebacks (context lines, highlighting) cost 20-40 ms each; feedback
            # shows only "ename: evalue" (autograder.feedback), the autograded notebook every frame.
            self.extra_arguments = [*self.extra_arguments, "--InteractiveShell.xmode=Plain"]

    def preprocess(self, nb, resources, km=None):  # noqa: D102 - see the module docstring
        codes = [c.source for c in nb.cells if c.cell_type == "code"]
        self._modules = imported_names(codes)
        imports = [c for c in nb.cells if _meta(c).get("grade_id") == IMPORTS_GRADE_ID and _meta(c).get("locked")]
        self._prelude = imports[0].source if imports else ""
        self._broken: str | None = None
        self._probed = False
        self._assignment = (resources or {}).get("nbgrader", {}).get("assignment")
        self._replay: list[str] = []  # earlier student and import cells, for a fresh kernel
        CELL_SECONDS.clear()
        # Started before the snapshot below, so they outlive this grading and serve the next ones.
        become_subreaper()
        forkserver = share_forkserver()
        kernel_template()
        processes = Descendants()
        try:
            with _environ(SHARED_FORKSERVER_ENV, forkserver):  # the kernels started here inherit it
                return super().preprocess(nb, resources, km=km)
        finally:
            left = processes.end()
            if left:
                self.log.warning("ended %d process(es) left running by the notebook: %s", len(left), left)

    async def async_start_new_kernel_client(self):
        """nbclient's, with a new kernel when one dies or does not answer (no notebook code has run in it)."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return await super().async_start_new_kernel_client()
            except RuntimeError as exc:  # jupyter_client's "Kernel didn't respond" / "Kernel died before replying"
                if attempt == START_ATTEMPTS:
                    raise
                self.log.warning("kernel %d of %d did not start (%s); starting another", attempt, START_ATTEMPTS, exc)
                self.km = self.create_kernel_manager()  # nbclient has shut the failed one down
                await self.async_start_new_kernel()

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def preprocess_cell(self, cell, resources, index):  # noqa: D102
        if cell.cell_type != "code" or not cell.source.strip():
            return super().preprocess_cell(cell, resources, index)
        if not self._probed:
            self._probe(None, index)  # the fingerprint, taken before any student code runs
            self._probed = True
        graded_test = bool(_meta(cell).get("grade")) and not _meta(cell).get("solution")
        if graded_test and self._broken:
            cell.outputs = [_error_output("GradingRefused", self._broken)]
            return cell, self.resources
        if is_student_cell(cell):
            reason = refusal(cell.source, self._modules)
            if reason:
                cell.outputs = [_error_output(
                    "GradingRefused", f"{_label(cell, index)} was not run: {reason}. The grader refuses "
                    "code that could change how it checks your work; what this cell defines is missing.")]
                self.log.warning("refused %s: %s", _label(cell, index), reason)
                return cell, self.resources
        if graded_test and self._prelude:
            self._quiet(self._prelude, {})
        cell = self._execute(cell, index)
        stderr_as_stdout(cell.outputs)
        if not graded_test and not any(o.output_type == "error" and o.ename == KERNEL_FAULT for o in cell.outputs):
            self._replay.append(cell.source)
        self._probe(cell, index)
        if graded_test and self._broken:
            cell.outputs.append(_error_output("GradingRefused", self._broken))
        return cell, self.resources

    def _execute(self, cell: NotebookNode, index: int) -> NotebookNode:
        """Run one cell within its time limit; a kernel fault costs this cell and restarts the kernel."""
        limit = cell_limit(self._assignment, _meta(cell).get("grade_id"))
        self.timeout, self.iopub_timeout = limit, INTERRUPT_REPLY_S
        self.error_on_timeout = {"ename": TIME_LIMIT, "evalue": f"this cell exceeded its time limit of {limit} s",
                                 "traceback": [f"{TIME_LIMIT}: this cell exceeded its time limit of {limit} s"]}
        start = time.monotonic()
        try:
            super().preprocess_cell(cell, self.resources, index)
        except (DeadKernelError, CellTimeoutError) as exc:
            died = isinstance(exc, DeadKernelError) or not run_sync(self.km.is_alive)()
            what = "the kernel died in this cell" if died else \
                f"the kernel did not respond in this cell (not even to an interrupt after {limit} s)"
            cell.outputs = [output for output in cell.get("outputs", []) if output.output_type == "stream"]
            cell.outputs.append(_error_output(KERNEL_FAULT, f"{what}; a fresh kernel graded the cells after it"))
            self.log.warning("%s: %s", _label(cell, index), what)
            self._fresh_kernel()
        if any(o.output_type == "error" and o.ename == TIME_LIMIT for o in cell.outputs):
            # the interrupt's KeyboardInterrupt says less than the limit that caused it
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "error" and o.ename == "KeyboardInterrupt")]
        if _meta(cell).get("grade_id"):
            CELL_SECONDS[_meta(cell)["grade_id"]] = time.monotonic() - start
        return cell

    def _fresh_kernel(self) -> None:
        """Restart the kernel and replay, silently, the student and import cells run so far."""
        run_sync(self.km.restart_kernel)(now=True)
        self.kc.stop_channels()
        self.start_new_kernel_client()
        self._probed = False
        self._probe(None, 0)  # a new fingerprint, before student code runs again
        self._probed = True
        for source in self._replay:
            try:
                self._quiet(source, {})
            except TimeoutError:
                self.log.warning("a replayed cell did not finish within %d s", PROBE_TIMEOUT_S)

    def _probe(self, cell: NotebookNode | None, index: int) -> None:
        """Run the integrity check; remember the first failure."""
        if self._broken:
            return
        where = "the start" if cell is None else _label(cell, index)
        try:
            reply = self._quiet("", {"integrity": PROBE})
            result = reply["user_expressions"]["integrity"]
            report = ast.literal_eval(result["data"]["text/plain"]) if result.get("status") == "ok" else \
                f"the check itself failed ({result.get('ename', 'error')})"
        except Exception as exc:  # noqa: BLE001 - a dead or deaf kernel cannot be trusted either
            report = f"the kernel did not answer the grader's check ({type(exc).__name__})"
        if report:
            self._broken = (f"not graded: after {where} the kernel was changed in a way that could fake "
                            f"results ({report}); tests from there on score 0")
            self.log.warning("%s", self._broken)

    async def _async_quiet(self, code: str, expressions: dict[str, str]) -> dict:
        """Run ``code`` silently in the kernel and return the reply's content."""
        msg_id = await ensure_async(self.kc.execute(code, silent=True, store_history=False,
                                                    user_expressions=expressions, allow_stdin=False))
        saved, self.timeout = self.timeout, PROBE_TIMEOUT_S
        try:
            reply = await self.async_wait_for_reply(msg_id)
        finally:
            self.timeout = saved
        if reply is None:
            raise TimeoutError("no reply")
        return reply["content"]

    _quiet = run_sync(_async_quiet)
