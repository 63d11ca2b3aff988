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
"""
from __future__ import annotations

import ast

from nbformat import NotebookNode
from nbclient.util import ensure_async, run_sync
from nbgrader.preprocessors import Execute

from .policy import imported_names, refusal

IMPORTS_GRADE_ID = "imports"
PROBE = "__import__('autograder.integrity', fromlist=['check']).check()"
PROBE_TIMEOUT_S = 60


class GradingRefused(Exception):
    """The kernel's state can no longer be trusted for grading (the message says why)."""


def _error_output(ename: str, evalue: str) -> NotebookNode:
    return NotebookNode(output_type="error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def _meta(cell: NotebookNode) -> dict:
    return cell.metadata.get("nbgrader", {})


def _label(cell: NotebookNode, index: int) -> str:
    gid = _meta(cell).get("grade_id")
    return f"cell {gid!r}" if gid else f"cell {index + 1}"


def is_student_cell(cell: NotebookNode) -> bool:
    """Code a student wrote or may have edited: a solution cell, or any cell without a lock."""
    meta = _meta(cell)
    return cell.cell_type == "code" and (bool(meta.get("solution")) or not meta.get("locked"))


class GuardedExecute(Execute):
    """nbgrader's ``Execute`` with refusal of tampering cells, trusted imports and integrity checks."""

    def preprocess(self, nb, resources, km=None):  # noqa: D102 - see the module docstring
        codes = [c.source for c in nb.cells if c.cell_type == "code"]
        self._modules = imported_names(codes)
        imports = [c for c in nb.cells if _meta(c).get("grade_id") == IMPORTS_GRADE_ID and _meta(c).get("locked")]
        self._prelude = imports[0].source if imports else ""
        self._broken: str | None = None
        self._probed = False
        return super().preprocess(nb, resources, km=km)

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
        cell, resources = super().preprocess_cell(cell, resources, index)
        self._probe(cell, index)
        if graded_test and self._broken:
            cell.outputs.append(_error_output("GradingRefused", self._broken))
        return cell, resources

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
