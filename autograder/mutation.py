"""Mutants and designs: replacement solution cells that the hidden tests must reject or accept.

A mutant is ``autograder/mutants/<assignment>/<name>.py``: a wrong-but-plausible solution. Its
header of ``# key: value`` lines (``assignment``, ``grade_id``, ``catches``, and optionally
``caught_by``: the test cell that must be the first to lose points) is followed by the complete
replacement source of the solution cell with that grade_id.

A design is ``autograder/designs/<assignment>/<name>.py``: a correct solution of a design
exercise, structurally different from the source notebook's, which must earn full marks. Its
header says ``assignment``, ``grade_id`` and ``design`` (what makes it different).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from .course import CourseError, designs_dir, mutants_dir

REQUIRED_KEYS = ("assignment", "grade_id", "catches")
DESIGN_KEYS = ("assignment", "grade_id", "design")
HEADER_KEYS = (*REQUIRED_KEYS, "caught_by", "design")
HEADER_LINE = re.compile(r"#\s*(\w+)\s*:\s*(.*?)\s*$")


class MutantError(CourseError):
    """A mutant file that cannot be used as it is."""


@dataclass(frozen=True)
class Mutant:
    """One parsed mutant file."""

    path: Path
    assignment: str
    grade_id: str
    catches: str
    source: str
    caught_by: str = ""


@dataclass(frozen=True)
class Design:
    """One parsed design file: a correct solution cell that must earn full marks."""

    path: Path
    assignment: str
    grade_id: str
    design: str
    source: str


def _parse(path: Path, required: tuple[str, ...]) -> tuple[dict[str, str], str]:
    """The ``# key: value`` header of a replacement-cell file and the source after it."""
    lines = path.read_text(encoding="utf-8").splitlines()
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
    source = "\n".join(lines[body_start:]).strip("\n")
    if not source.strip():
        raise MutantError(f"{path}: no replacement source after the header")
    if path.parent.name != header["assignment"]:
        raise MutantError(f"{path}: header says assignment {header['assignment']!r} "
                          f"but the file lives in {path.parent.name!r}")
    return header, source


def parse_mutant(path: Path | str) -> Mutant:
    """Parse a mutant file, raising :class:`MutantError` naming what is wrong."""
    path = Path(path)
    header, source = _parse(path, REQUIRED_KEYS)
    return Mutant(path, header["assignment"], header["grade_id"], header["catches"], source,
                  header.get("caught_by", ""))


def parse_design(path: Path | str) -> Design:
    """Parse a design file, raising :class:`MutantError` naming what is wrong."""
    path = Path(path)
    header, source = _parse(path, DESIGN_KEYS)
    return Design(path, header["assignment"], header["grade_id"], header["design"], source)


def mutant_files(assignment: str, root: Path | str | None = None) -> list[Path]:
    """The mutant files of ``assignment``, sorted by name."""
    return sorted(mutants_dir(assignment, root).glob("*.py"))


def design_files(assignment: str, root: Path | str | None = None) -> list[Path]:
    """The design files of ``assignment`` (none for most exercises), sorted by name."""
    return sorted(designs_dir(assignment, root).glob("*.py"))


def splice(nb: NotebookNode, mutant: Mutant | Design) -> NotebookNode:
    """A copy of ``nb`` whose solution cell ``mutant.grade_id`` holds the mutant's (or design's) source."""
    spliced = copy.deepcopy(nb)
    for cell in spliced.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade_id") != mutant.grade_id:
            continue
        if not meta.get("solution"):
            raise MutantError(f"{mutant.path}: cell {mutant.grade_id!r} is not a solution cell")
        cell.source = mutant.source
        return spliced
    raise MutantError(f"{mutant.path}: no cell with grade_id {mutant.grade_id!r} in the notebook")
