"""Benchmark: a cold spawned gloo group vs the warm helpers.runtime.cluster pool, a torchrun launch, and grading time.

    python benchmarks/bench.py            # or: make bench

Everything is measured in this one run and printed as a Markdown table (seconds of
wall time), so the ratios compare numbers taken on the same machine at the same time.
"""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
WORLD_SIZE = 4
ASSIGNMENT = "01_replicated_training"


def _spawned_rank(rank: int, world_size: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    t = torch.ones(1024)
    dist.all_reduce(t)
    dist.barrier()
    dist.destroy_process_group()


def cold_spawn_seconds() -> float:
    """One fresh 4-rank group with torch.multiprocessing.spawn doing one all_reduce."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        mp.spawn(_spawned_rank, args=(WORLD_SIZE, os.path.join(tmp, "store")), nprocs=WORLD_SIZE, join=True)
        return time.perf_counter() - start


def _all_reduce() -> float:
    t = torch.ones(1024)
    dist.all_reduce(t)
    return t[0].item()


def warm_run_seconds(calls: int = 10) -> tuple[float, float, float]:
    """(first call, tenth call, median of calls 2..10) of helpers.runtime.cluster.run."""
    from helpers.runtime.cluster import run, shutdown

    shutdown()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        assert run(_all_reduce, world_size=WORLD_SIZE) == [float(WORLD_SIZE)] * WORLD_SIZE
        times.append(time.perf_counter() - start)
    shutdown()
    return times[0], times[-1], statistics.median(times[1:])


def launch_seconds(assignment: str = "06_gradient_sharding") -> float:
    """The whole ``python -m helpers.launch`` command on ``assignment``'s source, 4 ranks under torchrun."""
    notebook = ROOT / "source" / assignment / f"{assignment}.ipynb"
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "helpers.launch", str(notebook), "--nproc-per-node", str(WORLD_SIZE),
                        "--workdir", tmp], cwd=ROOT, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - start


def stock_config(root: Path):
    """The course's nbgrader config with nbgrader's own autograde steps and kernels (no guard, no sandbox)."""
    from nbgrader.converters.autograde import Autograde

    from autograder.course import nbgrader_config

    config = nbgrader_config(root)
    defaults = Autograde()  # nbgrader's own lists
    config.Autograde.sanitize_preprocessors = list(defaults.sanitize_preprocessors)
    config.Autograde.autograde_preprocessors = list(defaults.autograde_preprocessors)
    return config


def grading_seconds() -> list[tuple[str, float, float, float]]:
    """(label, wall seconds, score, max score) of gradings of assignment 01's source, in one process.

    Three ways, each graded twice in a row and reported for its second (warm) grading: the
    course's pipeline with kernels in the sandbox (what every grading path does), the same
    pipeline without the sandbox (mode "off"), and stock nbgrader (its own Execute: hidden
    tests in the kernel, a fresh ``python -m ipykernel_launcher`` per notebook).
    """
    import nbformat
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    from autograder.course import quiet_logger
    from autograder.grading import scratch_course

    source = nbformat.read(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    out = []
    for label, mode in (("course pipeline, kernels in the sandbox", "required"),
                        ("course pipeline, no sandbox", "off"), ("stock nbgrader", None)):
        with scratch_course(ASSIGNMENT, ROOT, sandbox=mode) as course:
            if mode is None:
                config = stock_config(course.workdir)
                course.api = NbGraderAPI(coursedir=CourseDirectory(config=config, log=quiet_logger()),
                                         config=config, log=quiet_logger())
            for attempt in range(2):
                start = time.perf_counter()
                result = course.grade(source, f"bench{attempt}")
                seconds = time.perf_counter() - start
        out.append((label, seconds, result.score, result.max_score))
    return out


BASELINE = "cd5f7fb"  # the last commit whose test cells ran in the student's kernel, unsandboxed
BASELINE_SCRIPT = """
import time
from autograder.grading import grade_notebook
for attempt in range(2):
    start = time.perf_counter()
    result = grade_notebook("source/{a}/{a}.ipynb", "{a}")
print(time.perf_counter() - start, result.score, result.max_score)
"""


def baseline_seconds(ref: str = BASELINE) -> tuple[str, float, float, float] | None:
    """The same warm grading with the code of commit ``ref`` (a git worktree); None without git history."""
    import subprocess

    if subprocess.run(["git", "cat-file", "-e", ref], cwd=ROOT, capture_output=True).returncode != 0:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        tree = os.path.join(tmp, "baseline")
        subprocess.run(["git", "worktree", "add", "--detach", "-q", tree, ref], cwd=ROOT, check=True)
        try:
            done = subprocess.run([sys.executable, "-c", BASELINE_SCRIPT.format(a=ASSIGNMENT)], cwd=tree,
                                  env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True, check=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=ROOT, check=True)
    seconds, score, max_score = (float(x) for x in done.stdout.split()[-3:])
    return f"the code of {ref} (test cells in the student's kernel, no sandbox)", seconds, score, max_score


def graded_cell_seconds() -> list[tuple[str, float]]:
    """Seconds each graded test cell of the source notebook takes in one fresh kernel."""
    from datetime import datetime

    import nbclient
    import nbformat

    nb = nbformat.read(ROOT / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()
    timings = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            run = cell.metadata["execution"]
            start = datetime.fromisoformat(run["iopub.execute_input"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(run["shell.execute_reply"].replace("Z", "+00:00"))
            timings.append((meta["grade_id"], (end - start).total_seconds()))
    return timings


def main() -> None:
    cold = cold_spawn_seconds()
    first, tenth, median = warm_run_seconds()
    launch = launch_seconds()
    grades = grading_seconds()
    baseline = baseline_seconds()
    cells = graded_cell_seconds()
    print(f"Measured {date.today()} on {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}\n")
    print("| measurement | seconds |")
    print("| --- | ---: |")
    print(f"| cold `torch.multiprocessing.spawn` {WORLD_SIZE}-rank gloo group, one all_reduce | {cold:.3f} |")
    print(f"| first `helpers.runtime.cluster.run` (starts the forkserver and the group) | {first:.3f} |")
    print(f"| tenth `helpers.runtime.cluster.run`, same all_reduce (warm) | {tenth:.4f} |")
    print(f"| median of warm calls 2-10 | {median:.4f} |")
    print(f"| **ratio cold spawn / tenth warm run** | **{cold / tenth:.0f}x** |")
    print(f"| `python -m helpers.launch` lesson 06 on {WORLD_SIZE} ranks under torchrun (the whole command: agent, "
          f"workers, 4 training steps, verdict) | {launch:.2f} |")
    print(f"| **ratio torchrun launch / first `helpers.runtime.cluster.run`** | **{launch / first:.1f}x** |")
    for label, seconds, score, max_score in grades:
        print(f"| grade `source/{ASSIGNMENT}` (second grading in a row), {label}, score {score:g}/{max_score:g} "
              f"| {seconds:.1f} |")
    sandboxed, unsandboxed, stock = (seconds for _, seconds, _, _ in grades)
    if baseline is not None:
        label, before, score, max_score = baseline
        print(f"| grade `source/{ASSIGNMENT}` (second grading in a row), {label}, score {score:g}/{max_score:g} "
              f"| {before:.1f} |")
        print(f"| **ratio sandboxed / {BASELINE}** | **{sandboxed / before:.2f}x** |")
    print(f"| **ratio sandboxed / unsandboxed pipeline; sandboxed / stock nbgrader** "
          f"| **{sandboxed / unsandboxed:.2f}x; {sandboxed / stock:.2f}x** |")
    for grade_id, seconds in cells:
        print(f"| test cell `{grade_id}` in a fresh kernel (first cell starts the groups) | {seconds:.2f} |")
    load = os.getloadavg()[0]
    print(f"\nLoad average when the run ended: {load:.1f} (on {os.cpu_count()} cores).")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
