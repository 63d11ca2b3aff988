"""Tampering with the grader earns nothing; honest code scores what it earns (autograder.guard).

Each attack is graded by real nbgrader autograde on a tiny assignment whose tests rely on
``math.isclose`` and on the name ``math`` from the locked import cell, and whose first hidden
test binds a name (``ref``) that would answer the second exercise: each attack below scored
full marks while test cells ran in the student's kernel. Test cells now run in the grader
(autograder.verdicts), so the answer is wrong and every attack scores 0. Fast: no torch in
the kernel.
"""
from __future__ import annotations

import html
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell

from autograder.grading import scratch_course
from autograder.policy import imported_names, refusal
from tiny_course import assignment_notebook, nbgrader_cell, write_assignment

NAME = "00_tamper"
IMPORTS = "import math"
SOLUTION = "def add(a, b):\n    ### BEGIN SOLUTION\n    return a + b\n    ### END SOLUTION"
TEST = ("assert math.isclose(add(1, 2), 3)\n### BEGIN HIDDEN TESTS\n"
        "import operator as ref\n"
        "assert math.isclose(add(2.5, 0.25), 2.75), 'add(2.5, 0.25) must be 2.75'\n"
        "assert math.isclose(add(-7, 7), 0.0)\n### END HIDDEN TESTS")
SOLUTION_2 = "def times(a, b):\n    ### BEGIN SOLUTION\n    return a * b\n    ### END SOLUTION"
TEST_2 = ("assert times(2, 3) == 6\n### BEGIN HIDDEN TESTS\n"
          "assert math.isclose(times(2.5, -4), -10.0)\n### END HIDDEN TESTS")
WRONG = "def add(a, b):\n    return 0"


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    nb = assignment_notebook([
        new_markdown_cell("# Tamper\nImplement `add`."),
        nbgrader_cell(IMPORTS, "imports"),
        nbgrader_cell(SOLUTION, "add", solution=True),
        nbgrader_cell(TEST, "test_add", points=3),
        nbgrader_cell(SOLUTION_2, "times", solution=True),
        nbgrader_cell(TEST_2, "test_times", points=1),
    ])
    return write_assignment(tmp_path_factory.mktemp("tamper"), NAME, nb)


@pytest.fixture(scope="module")
def grader(course):
    with scratch_course(NAME, course) as scratch:
        yield scratch


def _submission(grader, solution: str, extra: str | None = None, after: str = "add"):
    """The release with ``solution`` in the answer cell and ``extra`` as a new cell after cell ``after``."""
    nb = nbformat.from_dict(grader.release)
    cell = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    cell["add"].source = solution
    if extra is not None:
        nb.cells.insert(nb.cells.index(cell[after]) + 1, new_code_cell(extra))
    return nb


ATTACKS = {
    # one statement registering an input transformer that blanks every later cell
    "transformer": "get_ipython().input_transformers_cleanup.append(lambda lines: [])",
    # the same, reached without any name or attribute the policy knows
    "transformer_obfuscated": ("import operator\n"
                               "shell = operator.attrgetter('__glo' + 'bals__')(add)['get_' + 'ipython']()\n"
                               "operator.attrgetter('input_transformers_' + 'cleanup')(shell)"
                               ".append(lambda lines: [])"),
    "rebind_check": "math.isclose = lambda *a, **k: True",
    "rebind_check_setattr": "setattr(math, 'isclose', lambda *a, **k: True)",
    # a persistent patch through an alias the policy cannot see
    "rebind_obfuscated": ("import operator\n"
                          "m = operator.attrgetter('__glo' + 'bals__')(add)['ma' + 'th']\n"
                          "setattr(m, 'isclose', lambda *a, **k: True)"),
    "rebind_name": "class _Always:\n    isclose = staticmethod(lambda *a, **k: True)\nmath = _Always()",
    "always_equal": "class Same(float):\n    def __eq__(self, other):\n        return True",
    "delegate_to_autograder": "from autograder.lessons.costs import ring_allreduce_bytes",
    "unpickle_code": "import torch\nx = torch.load('payload.pt', weights_only=False)",
    # cells the policy cannot parse: options to a cell magic, a __future__ that changes the grammar
    "unparsed_magic": "%%timeit -n1 -r1 -q\nget_ipython().input_transformers_cleanup.append(lambda lines: [])",
    "future_grammar": "from __future__ import barry_as_FLUFL\nassert 1 <> 2",
    # the kernel's half of the grader, replaced: it answers every request with "3"
    "forged_answers": ("import helpers.runtime.remote as r\n"
                       "r.serve = lambda request: r.encode({'value': 3})"),
}
# Names a hidden test leaves behind: `ref` (bound by test_add's hidden block) answers `times`.
LEFTOVER = "def times(a, b):\n    return ref.mul(a, b)"


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_attack_scores_what_the_code_earns(grader, attack):
    # The answer is wrong, so the only way to points is the attack: it must earn 0.
    result = grader.grade(_submission(grader, WRONG, ATTACKS[attack]), f"attack_{attack}")
    assert result.score == 0, (attack, result.cells)


def test_names_a_hidden_test_binds_stay_in_the_grader(grader):
    result = grader.grade(_submission(grader, WRONG, LEFTOVER, after="times"), "leftover")
    assert result.score == 0, result.cells
    assert "name 'ref' is not defined" in result.cells[1].message, result.cells[1]


@pytest.mark.parametrize("attack", ["transformer", "rebind_check"])
def test_refusal_is_reported_in_one_line(grader, attack):
    result = grader.grade(_submission(grader, WRONG, ATTACKS[attack]), f"report_{attack}")
    message = result.cells[0].message
    assert "GradingRefused" in message or any("refused" in n for n in result.notes), (message, result.notes)


def test_honest_code_with_harmless_extras_scores_full(grader):
    extra = "%timeit -n1 -r1 sum(range(10))\nimport sys\nprint(sys.float_info.epsilon)\nmath = None"
    honest = _submission(grader, "def add(a, b):\n    return a + b", extra)
    answer = next(c for c in honest.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "times")
    answer.source = "def times(a, b):\n    return a * b"
    result = grader.grade(honest, "honest")
    assert result.full_marks, result.cells


def test_nothing_the_kernel_writes_reaches_the_course_or_the_feedback(grader):
    # The kernel works in a private copy of the submission folder, inside the sandbox: the
    # course directory is not there to read, and what it writes stays in the sandbox.
    steal = ("import glob, os, shutil\n"
             "open('planted.txt', 'w').write('x')\n"
             "for path in glob.glob('../../../**/*.ipynb', recursive=True) + glob.glob('/work/**/*.py'):\n"
             "    shutil.copy(path, os.path.basename(path))")
    grader.grade(_submission(grader, WRONG, steal), "writer")
    grader.feedback("writer")
    for folder in ("autograded", "feedback"):
        files = sorted(p.name for p in (grader.workdir / folder / "writer" / NAME).iterdir())
        assert files == [f"{NAME}.{'ipynb' if folder == 'autograded' else 'html'}"], (folder, files)


def test_feedback_hides_hidden_tests(grader):
    truncating = "def add(a, b):\n    return int(a) + int(b)"  # passes the visible test, fails a hidden one
    grader.grade(_submission(grader, truncating), "feedback_student")
    text = html.unescape(grader.feedback("feedback_student"))
    assert "add(2.5, 0.25) must be 2.75" in text  # the failing check's message is shown
    for line in ("assert math.isclose(add(-7, 7), 0.0)",
                 "assert math.isclose(add(2.5, 0.25), 2.75), 'add(2.5, 0.25) must be 2.75'"):
        assert line not in text
    assert "hidden tests: not shown" in text


@pytest.mark.parametrize("source, expected", [
    ("p.grad = None\nsetattr(self, 'w', 1)\nsuper().__init__()", None),
    ("torch.Tensor.__eq__ = f", "assigns to torch.Tensor.__eq__"),
    ("import sys\nsys.modules['torch']", "uses sys.modules"),
    ("x = locals()['add']", "uses locals"),
    ("%%time\nmath.pi = 3", "inside a magic"),
    ("type(model).forward = f", "an attribute of a class"),
    # an imported name the student reuses for a variable of their own is not a module
    ("load = [0] * 4\nload[1] += 3", None),
    ("def f(run):\n    run.x = 1", None),
    ("math = 0\nmath.pi = 3", "assigns to math.pi"),  # `import math` always binds a module
    # fails closed: what the policy cannot read is refused, not run unchecked
    ("from __future__ import barry_as_FLUFL\nassert 1 <> 2", "cannot read this cell"),
    ("from __future__ import annotations", "imports from __future__"),
    ("x = (", "cannot read this cell"),
])
def test_policy_names_the_construct(source, expected):
    got = refusal(source, imported_names(["import torch\nimport math\nfrom helpers.shared.stored import load", source]))
    assert (got is None) if expected is None else (expected in got), got


def test_links_planted_by_the_kernel_lead_nowhere_in_the_grader(tmp_path):
    # Lesson 10's checks look at the checkpoint files the student's code wrote. A student's
    # save_checkpoint that plants links to the grading machine's files must neither list a
    # directory there, nor truncate or remove a file there (the checks' file operations run
    # in the kernel's sandbox, where the links lead nowhere).
    from autograder.course import release_notebook
    from autograder.grading import grade_notebook

    name = "10_worker_failure"
    victim = tmp_path / "victim.txt"
    victim.write_text("x" * 1000)
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "hidden_solution.py").write_text("")
    attack = (
        "import os\n"
        "def save_checkpoint(directory, step, model, optimizer, cursor, scaler=None):\n"
        "    rank = dist.get_rank()\n"
        "    path = os.path.join(directory, f'step_{step:08d}')\n"
        "    linked = step == 4 and 'course-l10-' not in directory\n"
        "    if rank == 0 and linked and not os.path.lexists(path):\n"
        f"        os.symlink({str(secret_dir)!r}, path)\n"
        "    elif rank == 0 and not linked:\n"
        "        os.makedirs(path, exist_ok=True)\n"
        "    dist.barrier()\n"
        "    if not linked:\n"
        "        target = os.path.join(path, f'rank_{rank}.pt')\n"
        "        if rank == 1 and step == 4 and not os.path.lexists(target):\n"
        f"            os.symlink({str(victim)!r}, target)\n"
        "        elif not os.path.islink(target):\n"
        "            open(target, 'w').close()\n"
        "    dist.barrier()\n"
        "    if rank == 0 and not linked:\n"
        "        open(os.path.join(path, 'COMMITTED'), 'w').close()\n"
        "    dist.barrier()\n"
        "def load_checkpoint(directory, model, optimizer, scaler=None):\n"
        "    return None\n")
    nb = nbformat.read(str(release_notebook(name)), as_version=4)
    stub = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "checkpoint")
    nb.cells.insert(nb.cells.index(stub) + 1, new_code_cell(attack))
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, str(path))
    result = grade_notebook(path, name)
    assert result.score == 0, result.cells
    assert victim.read_text() == "x" * 1000
    assert all("hidden_solution" not in c.message for c in result.cells), result.cells
