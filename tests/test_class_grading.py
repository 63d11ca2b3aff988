"""``python -m autograder grade-class``: a class graded several at once gets stock nbgrader's scores.

A small synthetic class (benchmarks/class_grading.py builds it: correct, partly wrong and
malformed submissions) is graded by stock sequential ``nbgrader autograde`` and then by
``grade-class``; every score must be the same, the malformed submission is reported in one
line while the rest are graded, and nbgrader's own feedback and export work on the result.
The full-size comparison (32 submissions, one hanging) is the benchmark itself.
"""
from __future__ import annotations

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "04_accumulation"


def _benchmark():
    spec = importlib.util.spec_from_file_location("class_grading", ROOT / "benchmarks" / "class_grading.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_grade_class_gives_stock_scores_reports_malformed_and_feeds_nbgrader(tmp_path: Path) -> None:
    bench = _benchmark()
    course = bench.make_course(ASSIGNMENT, tmp_path / "course")
    kinds = bench.make_class(ASSIGNMENT, course, students=7, hang=False)
    result = bench.grade_both(ASSIGNMENT, course, jobs=2, kinds=kinds)

    assert result.differ == []
    # Hostile submissions (all stubs plus one attacking cell) score 0 through nbgrader autograde and
    # grade-class alike (differ is empty); tests/test_tamper.py grades such attacks one at a time.
    for student in bench.HOSTILE:
        assert bench.gradebook_score(course, ASSIGNMENT, student)[0] == 0, student
    assert result.ours_exit == 1  # some submissions could not be graded; the others were
    lines = result.ours_output.splitlines()
    assert sum(line.startswith("[") and "/" in line.split("]")[0] for line in lines) == len(kinds)
    assert any("malformed_not_json" in line and "NOT GRADED" in line for line in lines)
    assert any("NotJSONError: Notebook does not appear to be JSON" in line for line in lines)
    assert "slowest so far:" in result.ours_output
    assert "student01" in result.ours_output and "10/10" in result.ours_output  # the correct one

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for command in (["generate_feedback", ASSIGNMENT, "--force"], ["export"]):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *command], cwd=course, env=env,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    assert (course / "feedback" / "student01" / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()
    with open(course / "grades.csv", newline="") as f:
        exported = {row["student_id"]: float(row["score"]) for row in csv.DictReader(f)}
    assert exported["student01"] == 10.0 and exported["student02"] < 10.0
