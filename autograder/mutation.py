"""Mutants: wrong-but-plausible solutions that the hidden tests must reject.

A mutant is ``autograder/mutants/<assignment>/<name>.py``: a header of ``# key: value``
lines (``assignment``, ``grade_id``, ``catches``, and optionally ``caught_by``: the test cell
that must be the first to lose points) followed by the complete replacement source of the
solution cell with that grade_id.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path

from nbformat import NotebookNode

from .course import CourseError, mutants_dir

REQUIRED_KEYS = ("assignment", "grade_id", "catches")
HEADER_KEYS = (*REQUIRED_KEYS, "caught_by")
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


def parse_mutant(path: Path | str) -> Mutant:
    """Parse a mutant file, raising :class:`MutantError` naming what is wrong."""
    path = Path(path)
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
    missing = [key for key in REQUIRED_KEYS if not header.get(key)]
    if missing:
        raise MutantError(f"{path}: header is missing {', '.join(missing)} "
                          f"(expected leading lines '# assignment: ...', '# grade_id: ...', "
                          f"'# catches: ...')")
    source = "\n".join(lines[body_start:]).strip("\n")
    if not source.strip():
        raise MutantError(f"{path}: no replacement source after the header")
    if path.parent.name != header["assignment"]:
        raise MutantError(f"{path}: header says assignment {header['assignment']!r} "
                          f"but the file lives in {path.parent.name!r}")
    return Mutant(path, header["assignment"], header["grade_id"], header["catches"], source,
                  header.get("caught_by", ""))


def mutant_files(assignment: str, root: Path | str | None = None) -> list[Path]:
    """The mutant files of ``assignment``, sorted by name."""
    return sorted(mutants_dir(assignment, root).glob("*.py"))


def splice(nb: NotebookNode, mutant: Mutant) -> NotebookNode:
    """A copy of ``nb`` whose solution cell ``mutant.grade_id`` holds the mutant's source."""
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
