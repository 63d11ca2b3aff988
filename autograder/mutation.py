"""Mutants and designs: solution cells that the hidden tests must reject or accept.

A mutant is ``autograder/mutants/<assignment>/<name>.py``: a wrong-but-plausible solution. Its
header of ``# key: value`` lines (``assignment``, ``grade_id``, ``catches``, and optionally
``caught_by``: the test cell that must be the first to lose points) is followed by a unified diff
(:mod:`autograder.patches`: ``---``/``+++`` lines, then ``@@`` hunks with 3 lines of context)
against the source notebook's solution cell with that grade_id, as a student would write it: without
its ``### BEGIN SOLUTION`` / ``### END SOLUTION`` lines. The check applies it exactly; when
the source cell has changed under it, or when it changes nothing, the check fails naming the file,
the hunk and the cell line that no longer matches, so a mutant cannot drift into a stale copy.

Writing and mending mutants (``--root`` before ``mutant`` for another course directory):

    python -m autograder mutant diff PATH            # a file written as header + whole cell -> patch, in place
    python -m autograder mutant show PATH [--at REV]  # print the mutated cell
    python -m autograder mutant expand PATH [--at REV]  # patch -> header + whole cell, in place, to edit

To write one, put the header and the whole wrong cell in PATH, then ``mutant diff PATH``. When the
source cell changed and a patch no longer applies: ``mutant expand PATH --at REV`` with REV a commit
where it applied (``git log -1 --format=%h -- PATH``), carry the mutation over to the new cell
(``git diff REV -- source/<assignment>`` shows what changed), then ``mutant diff PATH``.

A design is ``autograder/designs/<assignment>/<name>.py``: a correct solution of a design
exercise, structurally different from the source notebook's, which must earn full marks. Its
header says ``assignment``, ``grade_id`` and ``design`` (what makes it different), and the whole
replacement cell follows it (a design shares little with the source's cell).
"""
from __future__ import annotations

import copy
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .course import CourseError, designs_dir, mutants_dir, read_notebook, source_notebook
from .patches import Hunk, PatchError, apply_patch, is_patch, make_patch, parse_patch

REQUIRED_KEYS = ("assignment", "grade_id", "catches")
DESIGN_KEYS = ("assignment", "grade_id", "design")
HEADER_KEYS = (*REQUIRED_KEYS, "caught_by", "design")
HEADER_LINE = re.compile(r"#\s*(\w+)\s*:\s*(.*?)\s*$")
SOLUTION_MARKER = re.compile(r"\s*### (BEGIN|END) SOLUTION\s*$")
COMMAND = "python -m autograder mutant"
SOURCE_NAME = "source/{a}/{a}.ipynb"


class MutantError(CourseError):
    """A mutant file that cannot be used as it is."""


@dataclass(frozen=True)
class Mutant:
    """One parsed mutant file: its header and its patch of the source's solution cell ``grade_id``."""

    path: Path
    assignment: str
    grade_id: str
    catches: str
    patch: tuple[Hunk, ...]
    caught_by: str = ""


@dataclass(frozen=True)
class Design:
    """One parsed design file: a correct solution cell that must earn full marks."""

    path: Path
    assignment: str
    grade_id: str
    design: str
    source: str


def shown(path: Path) -> str:
    """``path`` as a command line would name it: relative to the working directory when under it."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _read(path: Path, required: tuple[str, ...]) -> tuple[dict[str, str], list[str], list[str]]:
    """The ``# key: value`` header of a mutant or design file, its header lines and the lines after them."""
    lines = path.read_text(encoding="utf-8").split("\n")
    header: dict[str, str] = {}
    body_start = 0
    for body_start, line in enumerate(lines + [""]):
        match = HEADER_LINE.match(line)
        if not match or match.group(1) not in HEADER_KEYS:
            break
        if match.group(1) in header:
            raise MutantError(f"{path}: header key {match.group(1)!r} given twice")
        header[match.group(1)] = match.group(2)
    missing = [key for key in required if not header.get(key)]
    if missing:
        expected = ", ".join(f"'# {key}: ...'" for key in required)
        raise MutantError(f"{path}: header is missing {', '.join(missing)} (expected leading lines {expected})")
    if path.parent.name != header["assignment"]:
        raise MutantError(f"{path}: header says assignment {header['assignment']!r} "
                          f"but the file lives in {path.parent.name!r}")
    return header, lines[:body_start], lines[body_start:]


def _whole_cell(path: Path, body: list[str]) -> str:
    """The replacement cell that follows a header (a design's, or a mutant's written the old way)."""
    source = "\n".join(body).strip("\n")
    if not source.strip():
        raise MutantError(f"{path}: no replacement source after the header")
    return source


def parse_mutant(path: Path | str) -> Mutant:
    """Parse a mutant file (header and patch), raising :class:`MutantError` naming what is wrong."""
    path = Path(path)
    header, _, body = _read(path, REQUIRED_KEYS)
    if not any(line.strip() for line in body):
        raise MutantError(f"{path}: no patch after the header")
    if not is_patch(body):
        raise MutantError(f"{path}: after the header comes no patch (a whole cell written the old way?); "
                          f"turn it into one with `{COMMAND} diff {shown(path)}`")
    try:
        hunks = parse_patch("\n".join(body))
    except PatchError as exc:
        raise MutantError(f"{path}: {exc}") from None
    return Mutant(path, header["assignment"], header["grade_id"], header["catches"], tuple(hunks),
                  header.get("caught_by", ""))


def parse_design(path: Path | str) -> Design:
    """Parse a design file, raising :class:`MutantError` naming what is wrong."""
    path = Path(path)
    header, _, body = _read(path, DESIGN_KEYS)
    return Design(path, header["assignment"], header["grade_id"], header["design"], _whole_cell(path, body))


def mutant_files(assignment: str, root: Path | str | None = None) -> list[Path]:
    """The mutant files of ``assignment``, sorted by name."""
    return sorted(mutants_dir(assignment, root).glob("*.py"))


def design_files(assignment: str, root: Path | str | None = None) -> list[Path]:
    """The design files of ``assignment`` (none for most exercises), sorted by name."""
    return sorted(designs_dir(assignment, root).glob("*.py"))


def solution_cell(nb: NotebookNode, grade_id: str, origin: Path) -> NotebookNode:
    """The solution cell ``grade_id`` of ``nb``; :class:`MutantError` (naming ``origin``) if there is none."""
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") != grade_id:
            continue
        if not meta.get("solution"):
            raise MutantError(f"{origin}: cell {grade_id!r} is not a solution cell")
        return cell
    raise MutantError(f"{origin}: no cell with grade_id {grade_id!r} in the notebook")


def replace_cell(nb: NotebookNode, grade_id: str, source: str, origin: Path) -> NotebookNode:
    """A copy of ``nb`` whose solution cell ``grade_id`` holds ``source`` (errors name ``origin``)."""
    spliced = copy.deepcopy(nb)
    solution_cell(spliced, grade_id, origin).source = source
    return spliced


def unmarked(source: str) -> tuple[str, list[int]]:
    """A solution cell as a student writes it: without its ``### BEGIN/END SOLUTION`` lines; and the
    number each line left has in the cell (for messages)."""
    kept = [(n, line) for n, line in enumerate(source.split("\n"), 1) if not SOLUTION_MARKER.match(line)]
    return "\n".join(line for _, line in kept), [n for n, _ in kept] or [1]


def mutated_source(mutant: Mutant, nb: NotebookNode) -> str:
    """The mutant's solution cell: its patch applied exactly to ``nb``'s cell ``mutant.grade_id`` (unmarked).

    Raises :class:`MutantError` naming the file, the hunk and the cell line when the patch no
    longer applies (the source cell changed under it), and when it changes nothing.
    """
    where = f"solution cell {mutant.grade_id!r} of {SOURCE_NAME.format(a=mutant.assignment)}"
    original, numbers = unmarked(solution_cell(nb, mutant.grade_id, mutant.path).source)
    try:
        source = apply_patch(original, list(mutant.patch), numbers)
    except PatchError as exc:
        path = shown(mutant.path)
        raise MutantError(
            f"{mutant.path}: patch no longer applies to {where}: {exc}. The source cell changed since the "
            f"mutant was written; fix: `{COMMAND} expand {path} --at REV` with REV a commit where it applied "
            f"(`git log -1 --format=%h -- {path}`), carry the mutation over to the new cell, then "
            f"`{COMMAND} diff {path}`") from None
    if source == original:
        raise MutantError(f"{mutant.path}: the patch changes nothing in {where}: a mutant must differ from it")
    return source


def splice(nb: NotebookNode, mutant: Mutant | Design) -> NotebookNode:
    """A copy of ``nb`` whose solution cell ``mutant.grade_id`` holds the mutant's (or design's) source."""
    source = mutated_source(mutant, nb) if isinstance(mutant, Mutant) else mutant.source
    return replace_cell(nb, mutant.grade_id, source, mutant.path)


# ---- the `mutant` command: writing and mending mutant files ----

def source_at(assignment: str, root: Path, rev: str | None = None) -> NotebookNode:
    """The source notebook of ``assignment``: as it is, or as it was at git revision ``rev``."""
    if rev is None:
        return read_notebook(source_notebook(assignment, root))
    name = SOURCE_NAME.format(a=assignment)
    proc = subprocess.run(["git", "-C", str(root), "show", f"{rev}:./{name}"], capture_output=True, text=True,
                          env={**os.environ, "GIT_PAGER": "cat"})
    if proc.returncode != 0:
        raise MutantError(f"git show {rev}:{name} failed: {proc.stderr.strip() or proc.returncode}")
    return nbformat.reads(proc.stdout, as_version=4)


def diff_in_place(path: Path | str, root: Path) -> Mutant:
    """Rewrite a mutant file written as header + whole cell as header + patch against the source's cell.

    The patch is applied and compared with the whole cell before the file is written."""
    path = Path(path)
    header, header_lines, body = _read(path, REQUIRED_KEYS)
    if is_patch(body):
        raise MutantError(f"{path}: already a patch; `{COMMAND} expand {shown(path)}` turns it into the "
                          f"whole cell to edit")
    wanted = _whole_cell(path, body)
    nb = source_at(header["assignment"], root)
    original, _ = unmarked(solution_cell(nb, header["grade_id"], path).source)
    patch = make_patch(original, wanted, f"{SOURCE_NAME.format(a=header['assignment'])} {header['grade_id']}")
    if not patch:
        raise MutantError(f"{path}: the cell is the source's solution cell {header['grade_id']!r} as it is: "
                          f"a mutant must differ from it")
    mutant = Mutant(path, header["assignment"], header["grade_id"], header["catches"], tuple(parse_patch(patch)),
                    header.get("caught_by", ""))
    if mutated_source(mutant, nb) != wanted:
        raise MutantError(f"{path}: the patch does not reproduce the cell (a bug in autograder.patches)")
    path.write_text("\n".join([*header_lines, patch]) + "\n", encoding="utf-8")
    return mutant


def show(path: Path | str, root: Path, rev: str | None = None) -> str:
    """The mutated solution cell of a mutant file, against the source as it is or at git revision ``rev``."""
    mutant = parse_mutant(path)
    return mutated_source(mutant, source_at(mutant.assignment, root, rev))


def expand_in_place(path: Path | str, root: Path, rev: str | None = None) -> str:
    """Rewrite a mutant file as header + whole mutated cell (to edit, then `mutant diff`); returns the cell."""
    path = Path(path)
    source = show(path, root, rev)
    _, header_lines, _ = _read(path, REQUIRED_KEYS)
    path.write_text("\n".join([*header_lines, source]) + "\n", encoding="utf-8")
    return source
