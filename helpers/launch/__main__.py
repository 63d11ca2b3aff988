"""The command: run a lesson's training script with your notebook's code under ``torchrun``.

    python -m helpers.launch NOTEBOOK [--nproc-per-node N] [--backend auto|gloo|nccl] [--max-restarts R]
                             [--timeout S] [--workdir DIR] [-- LESSON OPTIONS]

On one machine it runs ``torchrun --standalone``. On several, run the same command on every
machine with ``--nnodes N --rdzv-endpoint HOST:PORT`` (a port on one of them that all reach) and
the same ``--rdzv-id``: torchrun's c10d rendezvous then forms one group of N x nproc-per-node
ranks. ``--print-command`` prints the torchrun command instead of running it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import psutil

from helpers.launch import MISSING, VERDICT_FILE, MissingCode, check_source, script_constant
from helpers.lessons import LESSONS, lesson

ROOT = Path(__file__).resolve().parents[2]  # the course (or student copy) root, which holds helpers/
IMPORTS_GRADE_ID = "imports"
# The command's own limit on a whole run, after which every process it started is killed: a
# backstop, since a rank waiting in a collective gives up after --timeout on its own.
RUN_LIMIT_S = 600


class LaunchError(Exception):
    """A notebook or lesson the command cannot run (exit status 2, as for a failed run)."""


def student_source(notebook: nbformat.NotebookNode) -> str:
    """The notebook's import cell and solution cells, in order: the code the lesson script imports."""
    parts = []
    for cell in notebook.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and (meta.get("solution") or meta.get("grade_id") == IMPORTS_GRADE_ID):
            parts.append(f"# --- cell {meta.get('grade_id', '?')} ---\n{cell.source}\n")
    return "\n".join(parts)


def cuda_available() -> bool:
    """Whether torch sees a GPU (imported here only when NCCL is asked for: torch takes seconds to import)."""
    import torch

    return torch.cuda.is_available()


def lesson_of(notebook: Path) -> str:
    """The lesson number ``NN`` of ``NN_slug.ipynb``."""
    match = re.match(r"(\d\d)_", notebook.name)
    if not match:
        raise LaunchError(f"{notebook.name} is not a lesson notebook (NN_slug.ipynb)")
    return match.group(1)


def script_of(number: str) -> tuple[str, Path]:
    """The module and file of lesson ``NN``'s torchrun script (``helpers/lNN_slug/launch.py``)."""
    try:
        module = lesson(number).launch
    except KeyError:
        module = None
    if module is None:
        have = [item.nn for item in LESSONS if item.launch]
        raise LaunchError(f"lesson {number} has no torchrun script (lessons with one: {', '.join(have)})")
    return module, ROOT / (module.replace(".", "/") + ".py")


def torchrun_command(module: str, student: Path, out: Path, args: argparse.Namespace) -> list[str]:
    """The torchrun command line that runs ``module`` with the student's code."""
    if args.nnodes == 1:
        where = ["--standalone"]
    elif not args.rdzv_endpoint:
        raise LaunchError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (a machine every node reaches)")
    else:
        where = [f"--nnodes={args.nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={args.rdzv_endpoint}",
                 f"--rdzv-id={args.rdzv_id}"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={args.nproc_per_node}",
            f"--max-restarts={args.max_restarts}", "-m", module, "--student", str(student), "--out", str(out),
            "--backend", args.backend, "--timeout", str(args.timeout), *args.lesson_options]


def end_all(proc: subprocess.Popen) -> None:
    """Kill torchrun and every worker it started (workers run in sessions of their own)."""
    try:
        top = psutil.Process(proc.pid)
        family = [top, *top.children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for p in family:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    proc.wait()
    psutil.wait_procs(family[1:], timeout=10)


def run(args: argparse.Namespace) -> int:
    """Write the student's module, run torchrun, and return the command's exit status."""
    notebook_path = Path(args.notebook)
    if not notebook_path.is_file():
        raise LaunchError(f"no notebook {notebook_path}")
    module, script = script_of(lesson_of(notebook_path))
    source = student_source(nbformat.read(notebook_path, as_version=4))
    try:
        check_source(source, script_constant(script, "NEEDS", ()))
    except MissingCode as exc:
        raise LaunchError(str(exc)) from None
    if args.backend == "nccl" and not cuda_available():
        raise LaunchError("--backend nccl needs CUDA, and torch sees no GPU here; use --backend gloo")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="course-launch-"))
    workdir.mkdir(parents=True, exist_ok=True)
    student = workdir / f"student_{notebook_path.stem}.py"
    student.write_text(source, encoding="utf-8")
    out = workdir / "out"  # the verdict, and what the script writes (lesson 10: its checkpoints)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    if args.max_restarts is None:
        args.max_restarts = script_constant(script, "MAX_RESTARTS", 0)
    command = torchrun_command(module, student, out, args)
    if args.print_command:
        print(shlex.join(command))
        return 0
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    # TORCH_DISABLE_SHARE_RDZV_TCP_STORE: torch 2.13's workers otherwise reuse the agent's store in a
    # restart attempt, and the restarted group fails to connect (lesson 10's script says more).
    env = {**os.environ, "PYTHONPATH": path, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    print(f"$ {shlex.join(command)}", flush=True)
    proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    try:
        status = proc.wait(timeout=args.limit)
    except subprocess.TimeoutExpired:
        print(f"error: the run took more than {args.limit:g} s and was stopped", file=sys.stderr)
        return 2
    finally:
        if proc.poll() is None:  # timed out, or interrupted (Ctrl-C)
            end_all(proc)
    verdict = out / VERDICT_FILE
    if status != 0 or not verdict.exists():
        reason = "a function is missing or unsolved" if status == MISSING else "a rank failed (see above)"
        print(f"error: torchrun exited with status {status}: {reason}", file=sys.stderr)
        return 2
    return 0 if json.loads(verdict.read_text(encoding="utf-8"))["equal"] else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m helpers.launch", description=__doc__.split("\n\n")[0])
    p.add_argument("notebook", help="your lesson notebook, e.g. release/01_replicated_training/"
                                    "01_replicated_training.ipynb")
    p.add_argument("--nproc-per-node", type=int, default=2, help="ranks (processes) on this machine (default 2)")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto (default): nccl with one GPU per rank where CUDA is available, else gloo")
    p.add_argument("--nnodes", type=int, default=1,
                   help="machines: run the same command on each, with the same --rdzv-endpoint and --rdzv-id")
    p.add_argument("--rdzv-endpoint", help="HOST:PORT of the rendezvous (with --nnodes above 1)")
    p.add_argument("--rdzv-id", default="course", help="one id per job, the same on every node (default: course)")
    p.add_argument("--max-restarts", type=int,
                   help="torchrun restarts the whole group up to this many times (default: the lesson script's "
                        "MAX_RESTARTS, else 0)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a rank waits in one collective (default 60)")
    p.add_argument("--limit", type=float, default=RUN_LIMIT_S,
                   help=f"seconds for the whole run (default {RUN_LIMIT_S})")
    p.add_argument("--workdir", help="where your code's module and the verdict are written (default: a new temp dir)")
    p.add_argument("--print-command", action="store_true", help="print the torchrun command instead of running it")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = p.parse_args(argv[:split])
    args.lesson_options = argv[split + 1:]  # after --: options of the lesson's script, e.g. -- --steps 8
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that a stopped command ends its torchrun too
    try:
        return run(args)
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
