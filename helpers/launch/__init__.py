"""Your own notebook code under a real launcher: ``torchrun``, on gloo (CPU) or NCCL (GPUs).

    python -m helpers.launch release/01_replicated_training/01_replicated_training.ipynb --nproc-per-node 2

takes the solution cells of your notebook (and its import cell), writes them to a module, and
runs the lesson's training script ``helpers/launch/lNN.py`` with them under
``torchrun --standalone``: one process per rank, the rank and world size from the environment,
as at scale. The script trains a small model with your functions, compares the result with a
reference (single-process float64 training, or PyTorch's own DDP / ZeroRedundancyOptimizer),
and prints whether it is equal, the collectives each rank issued and the bytes it held. The
command exits 0 if every rank's result is equal to the reference, 1 if not, 2 if the run failed
(a rank raised, hung, or a function is missing); a failing rank is reported with the frame of
your code that failed. ``--backend nccl`` (the default where CUDA is available) puts each rank on
``cuda:LOCAL_RANK``. Several machines: see the README's section "Run your code under torchrun".

This module is the worker side that every lesson script shares (:func:`worker`); the command
is :mod:`helpers.launch.__main__`.
"""
from __future__ import annotations

import argparse
import ast
import faulthandler
import importlib.util
import json
import os
import resource
import signal
import sys
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.distributed as dist

from helpers.ledger import CollectiveRecord, install_recorder, record_of

VERDICT_FILE = "verdict.json"
MISSING = 3  # a worker's exit status when the student's module lacks a function: the command reports it


class MissingCode(Exception):
    """The notebook does not define (or has not yet implemented) a function the script needs."""


@dataclass
class Context:
    """What a lesson script's ``main`` gets besides the student's module."""

    rank: int
    world_size: int
    local_rank: int
    backend: str
    device: torch.device
    restart: int  # TORCHELASTIC_RESTART_COUNT: 0 on the first attempt
    args: argparse.Namespace
    records: list[CollectiveRecord] = field(default_factory=list)  # the student's collectives on this rank
    recording: bool = True

    @contextmanager
    def not_recorded(self) -> Iterator[None]:
        """Collectives issued inside (the reference run's, the verdict's) are not the student's: not recorded."""
        self.recording = False
        try:
            yield
        finally:
            self.recording = True

    def record(self, op: str, bound: dict[str, Any]) -> None:
        """Add one collective call to this rank's records (see :func:`helpers.ledger.install_recorder`)."""
        if self.recording:
            self.records.append(record_of(op, bound, len(self.records)))


@dataclass
class Outcome:
    """One rank's result: whether it equals the reference, and what it measured."""

    equal: bool
    detail: str  # e.g. "max |difference| 2.1e-08 (tolerance 1e-05)"
    reference: str  # what it was compared with
    held_bytes: int = 0  # bytes of the training state this rank held at the end (the lesson says which)
    notes: list[str] = field(default_factory=list)


def stubs(source: str) -> set[str]:
    """Names of the functions and classes in ``source`` whose body (or a method's) only raises
    NotImplementedError: the release notebook's unsolved cells."""
    found = set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        bodies = [node] if isinstance(node, ast.FunctionDef) else [
            n for n in node.body if isinstance(n, ast.FunctionDef)]
        for fn in bodies:
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]):
                found.add(node.name)
    return found


def defined_names(source: str) -> set[str]:
    """Names bound at the top level of ``source``: its functions, classes and assignments."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def check_source(source: str, needs: Sequence[str]) -> None:
    """Raise :class:`MissingCode` naming what ``source`` lacks of ``needs``, or has not implemented yet."""
    missing = [name for name in needs if name not in defined_names(source)]
    if missing:
        raise MissingCode(f"your notebook defines no {', '.join(missing)}: this lesson's script needs "
                          f"{', '.join(needs)} from your solution cells")
    unsolved = [name for name in needs if name in stubs(source)]
    if unsolved:
        raise MissingCode(f"not implemented yet: {', '.join(unsolved)} (its solution cell still raises "
                          f"NotImplementedError); this lesson's script needs {', '.join(needs)}")


def load_student(path: Path | str, needs: Sequence[str]) -> ModuleType:
    """The student's module at ``path``, once it defines (and implements) every name in ``needs``."""
    path = Path(path)
    check_source(path.read_text(encoding="utf-8"), needs)
    spec = importlib.util.spec_from_file_location("student", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def script_needs(script: Path) -> tuple[str, ...]:
    """A lesson script's ``NEEDS`` (the student's names it calls), read without importing the script."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "NEEDS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise ValueError(f"{script} has no NEEDS = (...) of the student's names it calls")


def parser(description: str) -> argparse.ArgumentParser:
    """The options every lesson script takes (the command passes them)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--student", required=True, help="the module written from your notebook's solution cells")
    p.add_argument("--out", required=True, help="a directory shared by the ranks: rank 0 writes the verdict there")
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl where CUDA is available, else gloo")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds a rank waits in one collective before it gives up (a rank that hangs or "
                        "skips a collective)")
    return p


def backend_and_device(choice: str, local_rank: int) -> tuple[str, torch.device]:
    """The process group's backend and this rank's device: NCCL on ``cuda:LOCAL_RANK``, or gloo on the CPU."""
    backend = ("nccl" if torch.cuda.is_available() else "gloo") if choice == "auto" else choice
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise SystemExit("--backend nccl needs CUDA, and torch sees no GPU here; use --backend gloo")
        torch.cuda.set_device(local_rank)
        return backend, torch.device("cuda", local_rank)
    return backend, torch.device("cpu")


def student_frames(exc: BaseException, student_file: str) -> str:
    """The traceback of ``exc`` cut to the frames of the student's module (all frames if none is)."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if os.path.samefile(f.filename, student_file)] if os.path.exists(student_file) else []
    shown = traceback.format_list(own or frames)
    return "".join(shown) + "".join(traceback.format_exception_only(type(exc), exc))


def peak_rss_bytes() -> int:
    """This process's peak resident memory, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _report(outcomes: list[dict[str, Any]], ledgers: list[list[CollectiveRecord]], backend: str) -> list[str]:
    """The lines rank 0 prints: the verdict, per-rank collectives and memory."""
    equal = all(o["equal"] for o in outcomes)
    lines = [f"{'EQUAL' if equal else 'NOT EQUAL'} to {outcomes[0]['reference']} on {len(outcomes)} ranks ({backend})"]
    for rank, (o, records) in enumerate(zip(outcomes, ledgers)):
        ops: dict[str, int] = {}
        for r in records:
            ops[r.op] = ops.get(r.op, 0) + 1
        calls = ", ".join(f"{n} {op}" for op, n in sorted(ops.items())) or "no collectives"
        sent = sum(r.ring_bytes for r in records)
        lines.append(f"  rank {rank}: {'equal' if o['equal'] else 'NOT equal'}: {o['detail']}")
        lines.append(f"          {calls}; {sent:,.0f} bytes sent under ring algorithms; "
                     f"held {o['held_bytes']:,} bytes of training state; {o['peak']}")
        lines.extend(f"          {note}" for note in o["notes"])
    return lines


def worker(main: Callable[[ModuleType, Context], Outcome], needs: Sequence[str], description: str,
           add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> None:
    """Run a lesson script's ``main(student, context)`` on this torchrun worker and report to rank 0."""
    p = parser(description)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", 0))
    # torchrun stops the other workers with SIGTERM when one fails: each prints where it was (a rank
    # that hangs in a loop, or waits in a collective that a peer skipped), then ends as before.
    faulthandler.register(signal.SIGTERM, all_threads=False, chain=True)
    try:
        student = load_student(args.student, needs)
    except MissingCode as exc:
        if rank == 0:
            print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(MISSING)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    backend, device = backend_and_device(args.backend, local_rank)
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=timedelta(seconds=args.timeout),
                            device_id=device if backend == "nccl" else None)
    context = Context(rank, dist.get_world_size(), local_rank, backend, device,
                      int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0)), args)
    install_recorder(context.record)
    try:
        outcome = main(student, context)
    except Exception as exc:  # noqa: BLE001 - reported per rank with the student's frames, then the run fails
        print(f"[rank {rank}] failed:\n{student_frames(exc, args.student)}", file=sys.stderr, flush=True)
        os._exit(1)  # no teardown: a peer may still wait in a collective; torchrun stops the others
    context.recording = False
    peak = (f"peak resident memory {peak_rss_bytes() / 2**20:,.0f} MiB" if backend == "gloo" else
            f"peak CUDA memory allocated {torch.cuda.max_memory_allocated(device) / 2**20:,.1f} MiB")
    mine = {**asdict(outcome), "peak": peak}
    outcomes: list[Any] = [None] * context.world_size
    ledgers: list[Any] = [None] * context.world_size
    dist.all_gather_object(outcomes, mine)
    dist.all_gather_object(ledgers, context.records)
    lines = _report(outcomes, ledgers, backend)
    if rank == 0:
        print("\n".join(lines), flush=True)
    if local_rank == 0:  # one verdict per machine, for the command that started this machine's ranks
        Path(args.out, VERDICT_FILE).write_text(json.dumps(
            {"equal": all(o["equal"] for o in outcomes), "lines": lines}), encoding="utf-8")
    dist.barrier()  # before teardown: destroying a gloo group while a peer is connected can abort
    dist.destroy_process_group()
