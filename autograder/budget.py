"""Per-cell time limits of the guarded grader, budgeted from each cell's measured need.

A graded cell's limit is ``LOAD_FACTOR * need + STARTUP_S`` seconds, at least ``MIN_S``,
where ``need`` is the cell's wall time measured when its assignment's source notebook was
graded on an idle machine (``autograder/cell_seconds.json``, written by
``benchmarks/load_grading.py --write-budgets``). The factor covers a loaded machine (a
grading next to two busy processes on 2 cores ran each cell at most about 3x slower, see
the benchmark); ``STARTUP_S`` covers a cell that first starts a gloo group under load (a
first cell of lesson 01, needing 0.36 s idle, ran past a 20 s limit while the course check
and two more gradings shared the 2 cores).
Cells without a measurement (student cells, a new assignment) get ``UNMEASURED_S``.
"""
from __future__ import annotations

import functools
import json
import math
from pathlib import Path

SECONDS_FILE = Path(__file__).resolve().with_name("cell_seconds.json")
LOAD_FACTOR = 10.0
STARTUP_S = 25.0
MIN_S = 30.0
UNMEASURED_S = 60.0


@functools.lru_cache(maxsize=1)
def measured_seconds() -> dict[str, dict[str, float]]:
    """``{assignment: {grade_id: seconds}}`` as measured on an idle machine (empty if absent)."""
    try:
        return json.loads(SECONDS_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cell_limit(assignment: str | None, grade_id: str | None) -> int:
    """The time limit of one cell, in whole seconds."""
    need = measured_seconds().get(assignment or "", {}).get(grade_id or "")
    if need is None:
        return int(UNMEASURED_S)
    return math.ceil(max(MIN_S, LOAD_FACTOR * need + STARTUP_S))
