"""The student's own code under torchrun (``python -m helpers.launch``): equal with the source's
solutions, not equal with a mutant, and failures reported per rank with no process left behind.

The tests that start torchrun run their commands :data:`PARALLEL` at a time (the :func:`pool` fixture):
a launch is mostly torchrun's agent and workers importing torch and waiting on each other, while the
test only waits for it. Each test still checks its own launch, and what it left running is listed the
moment its command returned."""
from __future__ import annotations

import socket
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import nbformat
import psutil
import pytest

from autograder.course import release_notebook, source_notebook
from autograder.mutation import parse_mutant, replace_cell, splice

ROOT = Path(__file__).resolve().parents[1]
# Each lesson with a torchrun script, and a mutant of its that trains to a different result.
LESSONS = {
    "01_replicated_training": "wrap_no_init_broadcast",
    "02_global_denominator": "train_mean_of_means",
    "03_gradient_buckets": "gb_sum_no_divide",
    "04_accumulation": "train_mean_of_means",
    "05_optimizer_state_sharding": "adam_local_gradients",
    "06_gradient_sharding": "rs_sum_no_normalize",
    "07_parameter_sharding": "unit_sum_not_mean",
    "08_prefetching": "plan_peak_without_shards",
    "10_worker_failure": "resume_never_loads",
}
RUN_S = 300  # a hang guard for one launch, not a speed limit
STARTS = 3  # tries to start a launch's interpreter (see launch)
# Launches at once: this file took 139 s with its 23 launches one after another, 106 s two at a time
# (2 cores, 2026-12-07; a launch keeps about 1.5 cores busy, so more at once would not help).
PARALLEL = 2
RUNS: dict[str, Callable[..., Any]] = {}  # test function name -> the commands it checks (see launches)


def launch(notebook: Path, workdir: Path, *options: str) -> subprocess.CompletedProcess:
    """``python -m helpers.launch NOTEBOOK`` on 2 ranks (unless ``options`` say otherwise).

    An interpreter that could not be started at all (``OSError`` from ``Popen``: the machine, not the
    launch under test) is started again, up to :data:`STARTS` times in all, each failure a warning."""
    command = [sys.executable, "-m", "helpers.launch", str(notebook), "--workdir", str(workdir), *options]

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_S)

    for start in range(1, STARTS):
        try:
            return run()
        except OSError as error:
            warnings.warn(f"start {start} of {STARTS} of {' '.join(command[1:4])} failed: {error!r}")
    return run()


def with_cell(assignment: str, grade_id: str, source: str, path: Path) -> Path:
    """The source notebook of ``assignment`` with solution cell ``grade_id`` replaced, written to ``path``."""
    nb = nbformat.read(source_notebook(assignment), as_version=4)
    nbformat.write(replace_cell(nb, grade_id, source, path), str(path))
    return path


def left_running(workdir: Path) -> list[int]:
    """Processes whose command line names ``workdir``: a launch's torchrun and workers."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if any(str(workdir) in part for part in (p.info["cmdline"] or [])):
            found.append(p.info["pid"])
    return found


def launches(run: Callable[..., Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a test whose commands are ``run(workdir, **its parameters)``: the :func:`pool` starts them, and the
    test's ``launched`` is what ``run`` returned, ``workdir``, and the processes left running when it returned."""
    def mark(test: Callable[..., Any]) -> Callable[..., Any]:
        RUNS[test.__name__] = run
        return test
    return mark


@pytest.fixture(scope="module")
def pool(request, tmp_path_factory):
    """The commands of every selected test marked with :func:`launches`, started :data:`PARALLEL` at a time in
    the order the tests run: {test node id: future of (what its run returned, workdir, left running)}."""
    def job(run: Callable[..., Any], params: dict[str, Any], workdir: Path) -> tuple[Any, Path, list[int]]:
        result = run(workdir, **params)
        return result, workdir, left_running(workdir)

    items = [item for item in request.session.items
             if getattr(item, "module", None) is request.module and item.originalname in RUNS]
    with ThreadPoolExecutor(PARALLEL, thread_name_prefix="launch") as executor:
        # Workdir names differ in their first characters: none is a prefix of another (left_running).
        futures = {item.nodeid: executor.submit(job, RUNS[item.originalname],
                                                dict(getattr(item, "callspec", None) and item.callspec.params or {}),
                                                tmp_path_factory.mktemp(f"{k:02d}_launch", numbered=False))
                   for k, item in enumerate(items)}
        try:
            yield futures
        finally:
            for future in futures.values():
                future.cancel()  # those not started yet (the session ended early); the running ones are waited for


@pytest.fixture
def launched(pool, request) -> tuple[Any, Path, list[int]]:
    """This test's launch from the :func:`pool`, once it has ended."""
    return pool[request.node.nodeid].result()


def source_run(workdir: Path, assignment: str) -> subprocess.CompletedProcess:
    return launch(source_notebook(assignment), workdir)


@launches(source_run)
@pytest.mark.parametrize("assignment", LESSONS)
def test_source_solutions_equal_the_reference(assignment, launched):
    proc, _, left = launched
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "EQUAL to" in proc.stdout and "NOT" not in proc.stdout
    assert "bytes sent under ring algorithms" in proc.stdout
    assert left == []


def mutant_run(workdir: Path, assignment: str) -> subprocess.CompletedProcess:
    mutant = parse_mutant(ROOT / "autograder" / "mutants" / assignment / f"{LESSONS[assignment]}.py")
    nb = splice(nbformat.read(source_notebook(assignment), as_version=4), mutant)
    path = workdir / f"{assignment}.ipynb"
    nbformat.write(nb, str(path))
    return launch(path, workdir / "run")


@launches(mutant_run)
@pytest.mark.parametrize("assignment", LESSONS)
def test_a_mutant_is_not_equal(assignment, launched):
    proc, _, _ = launched
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NOT EQUAL to" in proc.stdout


def test_unsolved_notebook_names_what_is_missing(tmp_path):
    proc = launch(release_notebook("06_gradient_sharding"), tmp_path)
    assert proc.returncode == 2
    assert "not implemented yet: Zero2Optimizer" in proc.stderr


RAISES = ("def reduce_scatter_gradients(flat_grad, group=None, denominator=None):\n"
          "    if dist.get_rank() == 1:\n"
          "        raise ValueError('rank 1 gives up')\n"
          "    return flat_grad\n")
SKIPS = ("def reduce_scatter_gradients(flat_grad, group=None, denominator=None):\n"
         "    shard = -(-flat_grad.numel() // dist.get_world_size())\n"
         "    out = flat_grad.new_zeros(shard)\n"
         "    if dist.get_rank() != 1:\n"
         "        dist.all_reduce(out)\n"
         "    return out\n")
HANGS = ("def reduce_scatter_gradients(flat_grad, group=None, denominator=None):\n"
         "    while dist.get_rank() == 1:\n"
         "        pass  # rank 1 never returns\n"
         "    return flat_grad\n")


def cell_run(source: str, timeout: str) -> Callable[[Path], subprocess.CompletedProcess]:
    """Lesson 06's source with ``source`` as its reduce_scatter_gradients cell, launched with ``--timeout``."""
    def run(workdir: Path) -> subprocess.CompletedProcess:
        path = with_cell("06_gradient_sharding", "reduce_scatter_gradients", source, workdir / "06_mutant.ipynb")
        return launch(path, workdir / "run", "--timeout", timeout)
    return run


@launches(cell_run(RAISES, "20"))
def test_a_rank_that_raises_is_reported_with_the_students_frame(launched):
    proc, _, left = launched
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[rank 1] failed:" in proc.stderr
    assert "raise ValueError('rank 1 gives up')" in proc.stderr and "ValueError: rank 1 gives up" in proc.stderr
    assert left == []


@launches(cell_run(SKIPS, "5"))
def test_a_rank_that_skips_a_collective_fails_the_run_in_its_timeout(launched):
    proc, _, left = launched
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "failed:" in proc.stderr
    assert left == []


@launches(cell_run(HANGS, "5"))
def test_a_rank_that_hangs_is_shown_where_it_hangs(launched):
    proc, workdir, left = launched
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[rank 0] failed:" in proc.stderr  # rank 0 gave up waiting for rank 1 in a collective
    student = workdir / "run" / "student_06_mutant.py"
    hang_line = student.read_text().splitlines().index("    while dist.get_rank() == 1:") + 1
    assert f'File "{student}", line {hang_line} in reduce_scatter_gradients' in proc.stderr  # rank 1's stack
    assert left == []


def two_machines_run(workdir: Path) -> tuple[list[int | None], list[str]]:
    """The multi-node command, with two "machines" on this one: each its own command and torchrun agent."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    nodes = [subprocess.Popen([sys.executable, "-m", "helpers.launch", str(source_notebook("06_gradient_sharding")),
                               "--workdir", str(workdir / f"node{k}"), "--nnodes", "2", "--nproc-per-node", "1",
                               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in range(2)]
    try:
        outputs = [node.communicate(timeout=RUN_S)[0] for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:  # the other machine never came: end its command (it ends its torchrun)
                node.terminate()
                node.wait(timeout=30)
    return [node.returncode for node in nodes], outputs


@launches(two_machines_run)
def test_two_machines_form_one_group_through_the_c10d_rendezvous(launched):
    (codes, outputs), _, left = launched
    assert codes == [0, 0], outputs
    assert sum("EQUAL to" in out and "on 2 ranks" in out for out in outputs) == 1, outputs  # printed by rank 0
    assert left == []


def test_print_command_shows_torchrun(tmp_path):
    proc = launch(source_notebook("06_gradient_sharding"), tmp_path, "--print-command", "--nproc-per-node", "4",
                  "--", "--steps", "8")
    assert proc.returncode == 0
    assert "torch.distributed.run --standalone --nproc-per-node=4" in proc.stdout
    assert "-m helpers.l06_gradient_sharding.launch" in proc.stdout and proc.stdout.rstrip().endswith("--steps 8")


def test_lesson_10_events_are_ordered_by_attempt_and_rank() -> None:
    from helpers.l10_worker_failure import launch as l10

    stdout = "noise\n[attempt 1, rank 0] b\n[attempt 0, rank 1] a\n[attempt 0, rank 0] c\n[attempt 0, rank 1] d\n"
    assert l10.events(stdout) == ["[attempt 0, rank 0] c", "[attempt 0, rank 1] a", "[attempt 0, rank 1] d",
                                  "[attempt 1, rank 0] b"]
