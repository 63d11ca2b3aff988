"""Same score idle or loaded (benchmarks/load_grading.py): long, so marked ``load``.

Grades every source notebook idle and then next to one spinning process per core and
requires identical scores (about 100 s on 2 cores). Deselect with ``-m "not load"``;
``make test`` (CI) runs it.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.load
def test_every_source_gets_the_same_score_idle_and_loaded():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_grading.py")],
                          capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scores identical" in proc.stdout
