"""nbgrader's Execute step, guarded: points come only from checks the student's code cannot rewrite.

:class:`GuardedExecute` replaces nbgrader's ``Execute`` in the course's autograde pipeline
(``autograder/nbgrader_config.py``), so ``nbgrader autograde`` and ``python -m autograder``
grade the same way. Around nbgrader's own cell-by-cell execution it adds:

1. **Verdicts outside the kernel.** A graded test cell whose code is the course's own (the
   gradebook's copy, :func:`trusted_sources`) never runs in the student's kernel: it runs in
   this process (:mod:`autograder.verdicts`), where the notebook's functions are stand-ins
   whose calls the kernel answers with plain data only. References, hidden cases' expected
   values and the checks never enter the kernel, and a cell scores by what happens here.
2. **Refusal, as a teaching signal.** A student cell (a solution cell or any cell without a
   lock) whose code :func:`autograder.policy.refusal` rejects is not run; it gets an error
   output naming the line and the construct. It is not what keeps grades honest (1 is).

It also contains faults to the cell they happen in:

4. **Time limits.** Each cell has its own limit (:func:`autograder.budget.cell_limit`); a
   cell over it is interrupted and reported as "exceeded its time limit of N s".
5. **Kernel faults.** A kernel that dies in a cell, or does not answer the interrupt after
   a time limit, costs that cell: it gets a one-line error, a fresh kernel replays the
   earlier student and import cells, and grading goes on.
6. **stderr is shown, not scored.** nbgrader scores a test cell that wrote to stderr 0;
   what kernel-side code writes to stderr (a ``print(..., file=sys.stderr)``, a warning)
   becomes stdout lines prefixed ``[stderr]``, as output from ranks is shown prefixed
   ``[rank k]`` (:mod:`helpers.runtime.cluster`). Only errors cost points.
7. **Warm starts, in a sandbox.** Kernels are forked from a template that has imported torch
   and ipykernel, and their ranks from the template's own forkserver, both inside a bubblewrap
   sandbox (:mod:`autograder.warm_kernels`, :mod:`autograder.sandbox`; the mode is the
   config's ``WarmKernelManager.sandbox``): once per grading process instead of once per
   kernel. Without bubblewrap, mode "required" refuses to grade (``SandboxUnavailable``).
   No notebook code runs in either; a rank that kills the forkserver costs only speed (the
   next kernel starts its own). The grader's own forkserver is never given to a kernel.
   Tracebacks are IPython's ``Plain`` ones (each frame's line, no context lines): the
   default ones cost 20-40 ms each.
8. **Leftover processes.** Every process started below the grader during grading, even
   one started in a new session, is ended when grading ends (:mod:`autograder.processes`).
9. **Mutants and designs graded for the course check only** (:attr:`GuardedExecute.mutant_of`):
   test cells before the replaced solution cell are not run, and nothing runs after the first graded cell
   that loses points. Every real grading leaves the trait empty and runs every cell.
10. **Kernels that do not start.** A kernel that dies or does not answer before any notebook
   code ran is shut down and another one started, up to ``START_ATTEMPTS`` kernels, so a
   fault of the machine's (an overloaded moment, a port taken between jupyter choosing it and
   the kernel binding it) does not fail a whole grading.
"""
from __future__ import annotations

import time
import traceback

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import Execute
from traitlets import Unicode

from helpers.runtime.cluster import share_forkserver

from .budget import cell_limit
from .policy import imported_names, refusal
from .processes import Descendants, become_subreaper, is_subreaper
from .verdicts import KernelTimeout, TestCells
from .warm_kernels import WarmKernelManager, sandbox_mode, start_template

IMPORTS_GRADE_ID = "imports"
QUIET_TIMEOUT_S = 60  # seconds a replayed cell may take in a fresh kernel
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


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` with test cells decided in this process and refusal of tampering cells."""

    mutant_of = Unicode("", help=(
        "The course check's short grading of a mutant or a design (autograder/check.py): the grade_id of the "
        "solution cell it replaced. Graded test cells before that cell are not run (a cell cannot observe code "
        "that runs after it), and once a graded cell has lost points no later cell runs. A cell not run keeps "
        "no output, which nbgrader scores as passed, so such a grading tells whether, and in which cell, the "
        "notebook first loses points; its total is not the notebook's score. Empty (every real grading): "
        "every cell runs.")).tag(config=True)

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
        self._trusted, self._trusted_tests = trusted_sources(resources or {})
        imports = self._trusted.get(IMPORTS_GRADE_ID) if self._trusted is not None else None
        if imports is None:
            cells = [c for c in nb.cells if _meta(c).get("grade_id") == IMPORTS_GRADE_ID and _meta(c).get("locked")]
            imports = cells[0].source if cells else ""
        self._prelude = imports
        self._tests: TestCells | None = None
        self._assignment = (resources or {}).get("nbgrader", {}).get("assignment")
        self._replay: list[str] = []  # earlier student and import cells, for a fresh kernel
        self._reached_mutant = not self.mutant_of  # whether the mutated cell has come (mutant_of)
        self._lost = False  # whether a graded cell has lost points (mutant_of)
        CELL_SECONDS.clear()
        # Started before the snapshot below, so they outlive this grading and serve the next ones.
        was_subreaper = is_subreaper()
        become_subreaper()
        share_forkserver()  # for the ranks of trusted code run here (autograder.verdicts); never a kernel's
        start_template(sandbox_mode(self.kernel_manager_class, self.config))  # SandboxUnavailable: no bubblewrap
        processes = Descendants()
        try:
            return super().preprocess(nb, resources, km=km)
        finally:
            left = processes.end()
            if left:
                self.log.warning("ended %d process(es) left running by the notebook: %s", len(left), left)
            if not was_subreaper:  # e.g. a test's process: as it was before grading
                become_subreaper(False)

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
        if self.mutant_of:
            self._reached_mutant = self._reached_mutant or _meta(cell).get("grade_id") == self.mutant_of
            if self._lost or (not self._reached_mutant and self._is_trusted_test(cell)):
                return cell, self.resources
        cell = self._run_cell(cell, index)
        if _meta(cell).get("grade") and any(o.output_type == "error" for o in cell.get("outputs", [])):
            self._lost = True
        return cell, self.resources

    def _run_cell(self, cell: NotebookNode, index: int) -> NotebookNode:
        """Decide a trusted test cell here, refuse a tampering student cell, or run the cell in the kernel."""
        if self._is_trusted_test(cell):
            return self._decide(cell, index)
        if is_student_cell(cell):
            reason = refusal(cell.source, self._modules)
            if reason:
                cell.outputs = [_error_output(
                    "GradingRefused", f"{_label(cell, index)} was not run: {reason}. The grader refuses "
                    "code that could change how it checks your work; what this cell defines is missing.")]
                self.log.warning("refused %s: %s", _label(cell, index), reason)
                return cell
        cell = self._execute(cell, index)
        stderr_as_stdout(cell.outputs)
        if not any(o.output_type == "error" and o.ename == KERNEL_FAULT for o in cell.outputs):
            self._replay.append(cell.source)
        return cell

    def _is_trusted_test(self, cell: NotebookNode) -> bool:
        """A graded test cell whose code is the course's own (from the gradebook when there is one)."""
        meta = _meta(cell)
        if not meta.get("grade") or meta.get("solution") or not meta.get("grade_id"):
            return False
        if self._trusted is None:  # not inside nbgrader autograde: the caller vouches for its notebook
            return True
        return self._trusted.get(meta["grade_id"]) == cell.source and meta["grade_id"] in self._trusted_tests

    def _decide(self, cell: NotebookNode, index: int) -> NotebookNode:
        """Run a test cell here, in the grader, against the kernel's names (autograder.verdicts).

        A kernel fault during the cell (no answer within the cell's limit, a kernel that dies
        or ignores the interrupt) decides the cell whatever the test code made of it.
        """
        gid = _meta(cell).get("grade_id")
        limit = cell_limit(self._assignment, gid)
        start = time.monotonic()
        self._fault = ""
        if self._tests is None:
            self._tests = TestCells(self._prelude, self._ask)
        printed, error = self._tests.run(cell.source, f"<test cell {gid}>", limit)
        cell.outputs = [NotebookNode(output_type="stream", name="stdout", text=printed)] if printed else []
        if self._fault == TIME_LIMIT:
            cell.outputs.append(_error_output(TIME_LIMIT, f"this cell exceeded its time limit of {limit} s"))
        elif self._fault:
            cell.outputs.append(_error_output(KERNEL_FAULT, f"{self._fault}; a fresh kernel graded the cells after it"))
            self.log.warning("%s: %s", _label(cell, index), self._fault)
            self._fresh_kernel()
        elif error is not None:
            lines = traceback.format_exception_only(type(error), error)
            ename = type(error).__name__
            evalue = "".join(lines).strip().split(": ", 1)[-1] if ": " in "".join(lines) else ""
            cell.outputs.append(NotebookNode(output_type="error", ename=ename, evalue=evalue,
                                             traceback=[f"{ename}: {evalue}"]))
        CELL_SECONDS[gid] = time.monotonic() - start
        return cell

    def _ask(self, expression: str, seconds: float) -> str:
        """The kernel's value of ``expression`` as text; KernelTimeout (and a noted fault) if it has none."""
        if self._fault:
            raise KernelTimeout(self._fault)
        try:
            reply = self._quiet("", {"answer": expression}, seconds)
        except DeadKernelError:
            self._fault = "the kernel died in this cell"
            raise KernelTimeout(self._fault) from None
        except TimeoutError:
            self._fault = TIME_LIMIT
            try:
                run_sync(self.km.interrupt_kernel)()
                self._quiet("", {}, INTERRUPT_REPLY_S)  # answered once the interrupted request has ended
            except (TimeoutError, DeadKernelError):
                self._fault = ("the kernel did not respond in this cell "
                               f"(not even to an interrupt after {seconds:.0f} s)")
            raise KernelTimeout(self._fault) from None
        result = reply.get("user_expressions", {}).get("answer", {})
        if result.get("status") != "ok":
            raise RuntimeError(f"the kernel could not run the grader's request ({result.get('ename', 'error')})")
        return result["data"]["text/plain"]

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
            cell.outputs = [o for o in cell.outputs
                            if not (o.output_type == "error" and o.ename == "KeyboardInterrupt")]
        if _meta(cell).get("grade_id"):
            CELL_SECONDS[_meta(cell)["grade_id"]] = time.monotonic() - start
        return cell

    def _fresh_kernel(self) -> None:
        """Restart the kernel and replay, silently, the student and import cells run so far."""
        run_sync(self.km.restart_kernel)(now=True)
        self.kc.stop_channels()
        self.start_new_kernel_client()
        for source in self._replay:
            try:
                self._quiet(source, {}, QUIET_TIMEOUT_S)
            except TimeoutError:
                self.log.warning("a replayed cell did not finish within %d s", QUIET_TIMEOUT_S)

    async def _async_quiet(self, code: str, expressions: dict[str, str], seconds: float) -> dict:
        """Run ``code`` silently in the kernel and return the reply's content (TimeoutError after ``seconds``)."""
        msg_id = await ensure_async(self.kc.execute(code, silent=True, store_history=False,
                                                    user_expressions=expressions, allow_stdin=False))
        saved, self.timeout = self.timeout, max(1, int(seconds + 0.999))
        try:
            reply = await self.async_wait_for_reply(msg_id)
        finally:
            self.timeout = saved
        if reply is None:
            raise TimeoutError("no reply")
        return reply["content"]

    _quiet = run_sync(_async_quiet)


def trusted_sources(resources: dict) -> tuple[dict[str, str] | None, frozenset[str]]:
    """(grade_id -> source of every locked cell the gradebook holds for this notebook, the test cells' grade_ids).

    Outside nbgrader autograde (no gradebook in ``resources``) the sources are None.

    Test cells run in the grader only with this code: a cell whose metadata claims a test's
    grade_id but whose source differs (nbgrader restores locked cells, so only a damaged
    submission gets here) runs in the kernel, like any student cell, and earns nothing.
    """
    info = resources.get("nbgrader", {})
    if not all(info.get(k) for k in ("db_url", "assignment", "notebook")):
        return None, frozenset()
    try:
        with Gradebook(info["db_url"]) as gb:
            notebook = gb.find_notebook(info["notebook"], info["assignment"])
            sources = {cell.name: cell.source for cell in notebook.source_cells if cell.locked}
            solutions = {cell.name for cell in notebook.solution_cells}
            tests = {cell.name for cell in notebook.grade_cells if cell.cell_type == "code"} - solutions
    except MissingEntry:
        return {}, frozenset()
    return sources, frozenset(tests)
