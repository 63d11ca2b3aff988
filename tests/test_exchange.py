"""The instructor's whole nbgrader workflow through nbgrader's exchange, as on one shared machine.

An instructor and two students, each student in their own home directory, run the real
``nbgrader`` command line against nbgrader 0.9's default (file-system) exchange under a throwaway
``Exchange.root``: the instructor ``generate_assignment``, ``release_assignment``; each student
``fetch_assignment``, edits, ``submit``; the instructor ``collect``, ``autograde``,
``generate_feedback``, ``release_feedback``; each student ``fetch_feedback``; the instructor
``export``. ``alice`` copies the source's solution cells into her fetched notebook and must get
full marks, ``bob`` hands the stubs back and must get 0, as the course check expects of the
source and the release; the scores are read from the gradebook, the fetched feedback pages and
the exported CSV. About 50 s on a 2-core machine, most of it ``autograde``.

The assignment is the real ``08_prefetching``, graded by the course's own config (guarded
execution in the bubblewrap sandbox): of the ten, its graded cells need the least time
(``autograder/cell_seconds.json``). The course directory holds only its source and an
``nbgrader_config.py`` that loads the course config and moves ``root`` and ``db_url`` into it
(the course config computes them from its own location; benchmarks/class_grading.py does the same).

The students run nbgrader in their home (``HOME`` set to it) with no course config: course id,
exchange root and, for ``submit`` and ``fetch_feedback``, student id come from the command line
(nbgrader 0.9's default exchange takes the student id from ``--student``, else the Unix user,
here the same for all three). What keeps bob from fetching alice's feedback is the submission
secret in each student's own nbgrader cache (``~/.local/share/jupyter/nbgrader_cache``), not
``--student``: students sharing a home (or ``Exchange.cache``) each fetch every page in it. As all
three are one Unix user here, ``collect`` warns that each submission "is owned by" another user
("cheating attempt?"); the option it names, ``CollectApp.check_owner``, is in nbgrader 0.9
``ExchangeCollect.check_owner``.
"""
from __future__ import annotations

import csv
import html
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from autograder.classroom import gradebook_score
from autograder.course import CONFIG_FILE, read_notebook, release_notebook, source_notebook
from autograder.feedback import PLACEHOLDER, hidden_lines
from autograder.release import comparable

ROOT = Path(__file__).resolve().parents[1]
ASSIGNMENT = "08_prefetching"
COURSE_ID = "shard-course"  # the course config's CourseDirectory.course_id
FULL, STUBS = "alice", "bob"
STUDENTS = (FULL, STUBS)


@dataclass
class Workflow:
    """The directories of one run of the workflow."""

    course: Path
    exchange: Path
    homes: dict[str, Path]

    def nbgrader(self, who: str, *args: str, exchange: bool = False) -> str:
        """Run ``nbgrader ARGS`` as ``who`` (the instructor in the course directory, a student in
        their home); fail the test with its output unless it exits 0; its output."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER_")}
        # nbgrader runs alembic (a script of the venv) to stamp a new gradebook
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        if who == "instructor":
            cwd = self.course
            env["PYTHONPATH"] = str(ROOT)  # the course config's pipeline imports autograder
        else:
            cwd = env["HOME"] = str(self.homes[who])
            args = (*args, "--course", COURSE_ID)
            if args[0] in ("submit", "fetch_feedback"):
                args = (*args, "--student", who)
        if exchange:
            args = (*args, f"--Exchange.root={self.exchange}")
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=300)
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{who}: nbgrader {' '.join(args)} exited {done.returncode}\n{output[-3000:]}"
        return output

    def fetched(self, student: str) -> Path:
        return self.homes[student] / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"

    def feedback_files(self, student: str) -> list[Path]:
        return sorted((self.homes[student] / ASSIGNMENT / "feedback").rglob("*.html"))


def with_solutions(nb: nbformat.NotebookNode, source: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with each solution cell's source replaced by the source notebook's cell of that grade_id."""
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    replaced = 0
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            cell.source = solutions[meta["grade_id"]]
            replaced += 1
    assert replaced == len(solutions)
    return nb


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Workflow:
    tmp = tmp_path_factory.mktemp("exchange-workflow")
    course, exchange = tmp / "course", tmp / "exchange"
    flow = Workflow(course, exchange, {s: tmp / "home" / s for s in STUDENTS})
    shutil.copytree(ROOT / "source" / ASSIGNMENT, course / "source" / ASSIGNMENT)
    (course / "nbgrader_config.py").write_text(
        f"load_subconfig({str(CONFIG_FILE)!r})  # noqa: F821\n"
        f"c.CourseDirectory.root = {str(course)!r}  # noqa: F821\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(course / 'gradebook.db')!r}  # noqa: F821\n",
        encoding="utf-8")
    exchange.mkdir()
    exchange.chmod(0o777)  # nbgrader's exchange root must exist and be writable by everyone
    for home in flow.homes.values():
        home.mkdir(parents=True)

    flow.nbgrader("instructor", "generate_assignment", ASSIGNMENT)
    flow.nbgrader("instructor", "release_assignment", ASSIGNMENT, exchange=True)
    source = read_notebook(source_notebook(ASSIGNMENT, ROOT))
    for student in STUDENTS:
        flow.nbgrader(student, "fetch_assignment", ASSIGNMENT, exchange=True)
        if student == FULL:
            nb = with_solutions(read_notebook(flow.fetched(student)), source)
            nbformat.write(nb, str(flow.fetched(student)))
        flow.nbgrader(student, "submit", ASSIGNMENT, exchange=True)
    flow.nbgrader("instructor", "collect", ASSIGNMENT, exchange=True)
    flow.nbgrader("instructor", "autograde", ASSIGNMENT)
    flow.nbgrader("instructor", "generate_feedback", ASSIGNMENT)
    flow.nbgrader("instructor", "release_feedback", ASSIGNMENT, exchange=True)
    for student in STUDENTS:
        flow.nbgrader(student, "fetch_feedback", ASSIGNMENT, exchange=True)
    flow.nbgrader("instructor", "export")
    return flow


def expected_scores() -> dict[str, tuple[float, float]]:
    """What the course check expects: the source scores full marks, the release (all stubs) 0."""
    source = read_notebook(source_notebook(ASSIGNMENT, ROOT))
    full = float(sum(c.metadata["nbgrader"].get("points", 0) for c in source.cells
                     if c.metadata.get("nbgrader", {}).get("grade")))
    assert full > 0
    return {FULL: (full, full), STUBS: (0.0, full)}


def test_students_fetch_the_committed_release_and_their_submissions_are_collected(workflow: Workflow) -> None:
    committed = comparable(read_notebook(release_notebook(ASSIGNMENT, ROOT)))
    assert comparable(read_notebook(workflow.fetched(STUBS))) == committed
    for student in STUDENTS:
        submitted = workflow.course / "submitted" / student / ASSIGNMENT
        assert read_notebook(submitted / f"{ASSIGNMENT}.ipynb") == read_notebook(workflow.fetched(student))
        assert (submitted / "timestamp.txt").is_file()


def test_gradebook_and_export_give_full_marks_and_zero(workflow: Workflow) -> None:
    expected = expected_scores()
    assert {s: gradebook_score(workflow.course, ASSIGNMENT, s) for s in STUDENTS} == expected
    with open(workflow.course / "grades.csv", newline="") as f:
        rows = [row for row in csv.DictReader(f) if row["assignment"] == ASSIGNMENT]
    assert {row["student_id"]: (float(row["score"]), float(row["max_score"])) for row in rows} == expected


def test_each_student_fetches_their_own_feedback_without_hidden_tests(workflow: Workflow) -> None:
    source = read_notebook(source_notebook(ASSIGNMENT, ROOT))
    secret = hidden_lines(source)
    tests = {c.metadata["nbgrader"]["grade_id"]: float(c.metadata["nbgrader"]["points"]) for c in source.cells
             if c.metadata.get("nbgrader", {}).get("grade") and not c.metadata["nbgrader"].get("solution")}
    assert secret and tests
    # release_feedback puts every page in one folder of the exchange, named by a hash of the
    # submission's secret; each student can only name their own
    assert len(list((workflow.exchange / COURSE_ID / "feedback").glob("*.html"))) == len(STUDENTS)
    for student, (score, full) in expected_scores().items():
        pages = workflow.feedback_files(student)
        assert len(pages) == 1, pages  # one submission of one notebook: one page
        made = workflow.course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        assert pages[0].read_bytes() == made.read_bytes()  # the page generate_feedback made for them
        text = html.unescape(pages[0].read_text(encoding="utf-8"))
        assert f"<h4>{ASSIGNMENT} (Score: {score} / {full})</h4>" in text, student
        for grade_id, points in tests.items():  # each test's result, in the contents and on the cell
            earned = points if score == full else 0.0
            assert f'<a href="#{grade_id}">Test cell</a> (Score: {earned} / {points})' in text, (student, grade_id)
            assert re.search(rf"Grade cell: <code>{re.escape(grade_id)}</code></span>\s*<span[^>]*>\s*"
                             rf"Score: {earned} / {points} ", text), (student, grade_id)
        autograded = read_notebook(workflow.course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
        assert hidden_lines(autograded) == secret  # graded with the hidden tests, shown without them
        assert text.count(PLACEHOLDER) >= len(tests)
        assert [line for line in secret if line in text] == []
    # Each student's home holds no copy of the other's page.
    for student, other in ((STUBS, FULL), (FULL, STUBS)):
        theirs = workflow.feedback_files(other)[0].read_bytes()
        assert not any(p.is_file() and p.read_bytes() == theirs for p in workflow.homes[student].rglob("*"))
