"""Unified diffs of one cell's source: written by :mod:`difflib`, applied exactly (no fuzz, no offsets).

A cell's source is taken as its lines split on ``"\\n"`` (no line ends, so no "no newline at end
of file" markers). :func:`make_patch` writes ``difflib.unified_diff`` of two such sources with
:data:`CONTEXT` lines of context; :func:`apply_patch` applies one, hunk by hunk, where its header
says, and refuses (:class:`PatchError`, naming the hunk, the cell line and what it expected) when
a context or removed line is not there to the letter. difflib has no applier; this one is the
inverse of its writer and nothing more: one file, hunks in order, exact lines. The one leniency:
an empty line inside a hunk stands for an empty context line (an editor that strips trailing
white space turns ``" "`` into ``""``).
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

CONTEXT = 3  # lines of context around each change (difflib's and git's default)
HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A patch that is malformed or that does not apply to the text it is meant for."""


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk: where it starts in the old and the new text, and its lines with their marks."""

    number: int  # 1 for the first hunk of the patch
    header: str
    old_start: int  # 0-based index of its first old line (where it inserts, if it has none)
    new_start: int
    lines: tuple[str, ...]  # each starts with " ", "-" or "+"

    @property
    def old(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " -"]

    @property
    def new(self) -> list[str]:
        return [line[1:] for line in self.lines if line[0] in " +"]


def make_patch(old: str, new: str, old_name: str = "source", new_name: str = "mutant",
               context: int = CONTEXT) -> str:
    """The unified diff turning ``old`` into ``new`` (empty when they are equal), without a final newline."""
    return "\n".join(difflib.unified_diff(old.split("\n"), new.split("\n"), old_name, new_name,
                                          n=context, lineterm=""))


def is_patch(lines: list[str]) -> bool:
    """Whether ``lines`` (blank lines first allowed) begin like a unified diff: ``---``, ``+++``, ``@@``."""
    body = [line for line in lines if line.strip()][:3]
    return (len(body) >= 3 and body[0].startswith("--- ") and body[1].startswith("+++ ")
            and body[2].startswith("@@ "))


def _start(first: str, count: str | None) -> tuple[int, int]:
    """0-based start and line count of one side of a hunk header (difflib: ``N`` means ``N,1``)."""
    length = 1 if count is None else int(count)
    return (int(first) - 1 if length else int(first)), length


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a unified diff of one file, checked for form (headers, line marks, line counts)."""
    lines = text.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    if not is_patch(lines):
        raise PatchError("not a unified diff: it must begin with a '--- ' line, a '+++ ' line and an '@@ ' hunk")
    hunks: list[Hunk] = []
    i = 2
    while i < len(lines):
        if not lines[i].strip():  # blank lines after the last hunk
            i += 1
            continue
        match = HUNK_HEADER.match(lines[i])
        if not match:
            raise PatchError(f"line {i + 1} of the patch: expected an '@@ -a,b +c,d @@' hunk header, "
                             f"found {lines[i]!r}")
        header, number = lines[i], len(hunks) + 1
        (old_start, old_len), (new_start, new_len) = _start(*match.group(1, 2)), _start(*match.group(3, 4))
        body, i = [], i + 1
        while sum(line[0] in " -" for line in body) < old_len or sum(line[0] in " +" for line in body) < new_len:
            if i >= len(lines):
                raise PatchError(f"hunk {number} ({header}) is cut short: the patch ends before its "
                                 f"{old_len} old and {new_len} new lines")
            line = lines[i] or " "  # an empty context line whose space an editor stripped
            if line[0] not in " -+":
                raise PatchError(f"hunk {number} ({header}), line {i + 1} of the patch: {line!r} starts with "
                                 f"neither ' ', '-' nor '+' (the header's line counts do not match the hunk)")
            body.append(line)
            i += 1
        hunk = Hunk(number, header, old_start, new_start, tuple(body))
        if len(hunk.old) != old_len or len(hunk.new) != new_len:
            raise PatchError(f"hunk {number} ({header}) has {len(hunk.old)} old and {len(hunk.new)} new lines, "
                             f"not the header's {old_len} and {new_len}")
        if hunks and old_start < hunks[-1].old_start + len(hunks[-1].old):
            raise PatchError(f"hunk {number} ({header}) starts inside or before hunk {number - 1}")
        hunks.append(hunk)
    return hunks


def apply_patch(old: str, hunks: list[Hunk], line_numbers: list[int] | None = None) -> str:
    """``old`` with ``hunks`` applied exactly where their headers say; :class:`PatchError` where a line differs.

    ``line_numbers`` (default 1, 2, ...): the number each line of ``old`` has where the error tells it."""
    lines = old.split("\n")
    number = line_numbers or list(range(1, len(lines) + 1))
    out: list[str] = []
    done = 0  # lines of ``old`` consumed
    for hunk in hunks:
        if hunk.new_start != hunk.old_start + len(out) - done:
            raise PatchError(f"hunk {hunk.number} ({hunk.header}): its new start does not follow from the "
                             f"hunks before it")
        out.extend(lines[done:hunk.old_start])
        for k, expected in enumerate(hunk.old):
            at = hunk.old_start + k
            if at >= len(lines):
                raise PatchError(f"hunk {hunk.number} ({hunk.header}): expected {expected!r} after line "
                                 f"{number[-1]}, where the cell ends")
            if lines[at] != expected:
                raise PatchError(f"hunk {hunk.number} ({hunk.header}), line {number[at]} of the cell: expected "
                                 f"{expected!r}, found {lines[at]!r}")
        out.extend(hunk.new)
        done = hunk.old_start + len(hunk.old)
    out.extend(lines[done:])
    return "\n".join(out)
