"""Same score idle or loaded (benchmarks/load_grading.py): long, so marked ``load``.

Grades every source notebook next to one spinning process per core and requires full
marks in every cell: the score every source must get (the course check, which ``make
test`` also runs, requires it of two gradings of each source, beside pytest). ``make test``
leaves it out (``tests/suite.py``); run it alone with ``pytest -m load``. Both passes, idle and
loaded: ``python benchmarks/load_grading.py``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.load
@pytest.mark.alone  # the load is the spinning processes, nothing else
def test_every_source_gets_full_marks_on_a_loaded_machine():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_grading.py"), "--loaded-only"],
                          capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scores identical" in proc.stdout
