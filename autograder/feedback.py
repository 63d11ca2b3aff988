"""Feedback that shows each test's result and message, never the hidden tests' code.

nbgrader renders the autograded notebook, whose test cells hold the hidden tests, into the
feedback HTML; IPython tracebacks and nbclient's timeout message quote cell source too.
:class:`HideHiddenTests` (in the course's ``GenerateFeedback`` pipeline) replaces each
hidden block by a placeholder line and reduces every error to ``ename: evalue``, with any
line that quotes hidden code removed. :func:`hidden_lines` and :func:`scrub` are shared
with the grading command line, whose messages follow the same rule.
"""
from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from traitlets import Bool

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
PLACEHOLDER = "# (hidden tests: not shown)"
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
MIN_LINE = 8  # shorter hidden lines (")", "else:") reveal nothing and occur everywhere


def hidden_lines(nb: NotebookNode) -> set[str]:
    """The stripped lines of every hidden block in ``nb`` long enough to be telling."""
    found: set[str] = set()
    for cell in nb.cells:
        inside = False
        for line in cell.get("source", "").splitlines():
            if BEGIN in line:
                inside = True
            elif END in line:
                inside = False
            elif inside and len(line.strip()) >= MIN_LINE:
                found.add(line.strip())
    return found


def without_hidden_blocks(source: str) -> str:
    """``source`` with each hidden block replaced by :data:`PLACEHOLDER`."""
    kept, inside = [], False
    for line in source.splitlines():
        if BEGIN in line:
            inside = True
            kept.append(line[: line.index(BEGIN)] + PLACEHOLDER)
        elif END in line:
            inside = False
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def scrub(text: str, secret: set[str]) -> str:
    """``text`` without ANSI colours and without the lines that quote a line of ``secret``."""
    plain = ANSI.sub("", text)
    kept = [line for line in plain.splitlines() if not any(s in line for s in secret)]
    return "\n".join(kept) + ("\n" if plain.endswith("\n") and kept else "")


def scrub_output(output: NotebookNode, secret: set[str]) -> None:
    """Remove hidden code from one cell output, in place; errors become ``ename: evalue``."""
    if output.output_type == "error":
        output.evalue = scrub(output.get("evalue", ""), secret)
        output.traceback = [f"{output.ename}: {output.evalue}" if output.evalue else output.ename]
    elif output.output_type == "stream":
        output.text = scrub(output.get("text", ""), secret)
    elif "data" in output:
        for mime in list(output.data):
            if mime.startswith("text/") and isinstance(output.data[mime], str):
                output.data[mime] = scrub(output.data[mime], secret)


class HideHiddenTests(Preprocessor):
    """Replace hidden test code, in sources and outputs, before feedback is rendered."""

    enabled = Bool(True).tag(config=True)  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb, resources):  # noqa: D102 - see the class docstring
        secret = hidden_lines(nb)
        for cell in nb.cells:
            if BEGIN in cell.get("source", ""):
                cell.source = without_hidden_blocks(cell.source)
            for output in cell.get("outputs", []):
                scrub_output(output, secret)
        return nb, resources
