"""The worker side every lesson script shares: load the student's module, join the group, run
the lesson's ``main`` on this rank, record its collectives and report to rank 0.

A lesson script ``helpers/lNN_slug/launch.py`` defines ``NEEDS`` (the student's names it calls) and
``main(student, context) -> Outcome``, and ends with ``worker(main, NEEDS, description)``.
"""
from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import json
import os
import resource
import signal
import sys
import traceback
import warnings
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from helpers.launch import MISSING, VERDICT_FILE, MissingCode, check_source
from helpers.runtime.ledger import RENAMED_WARNING, CollectiveRecord, install_recorder, record_of


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
        before, self.recording = self.recording, False
        try:
            yield
        finally:
            self.recording = before

    def ddp(self, module: torch.nn.Module) -> DistributedDataParallel:
        """PyTorch's DDP around ``module`` on this rank's device; its broadcast at construction is not recorded."""
        with self.not_recorded():
            return DistributedDataParallel(module, device_ids=[self.local_rank] if self.backend == "nccl" else None)

    def record(self, op: str, bound: dict[str, Any]) -> None:
        """Add one collective call to this rank's records (see :func:`helpers.runtime.ledger.install_recorder`)."""
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


def load_student(path: Path | str, needs: Sequence[str]) -> ModuleType:
    """The student's module at ``path``, once it defines (and implements) every name in ``needs``."""
    path = Path(path)
    check_source(path.read_text(encoding="utf-8"), needs)
    spec = importlib.util.spec_from_file_location("student", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    own = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(student_file)]
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
           add_arguments: Callable[[argparse.ArgumentParser], None] | None = None, backend: str | None = None) -> None:
    """Run a lesson script's ``main(student, context)`` on this torchrun worker and report to rank 0.

    ``backend``: the one this script always uses, whatever ``--backend`` says (lessons 08 and 10 run on
    gloo: their subject is a modelled clock and a restart, and their drivers keep tensors on the CPU).
    """
    p = parser(description)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args()
    rank = int(os.environ.get("RANK", 0))
    # torchrun stops the other workers with SIGTERM when one fails: each prints where it was (a rank
    # that hangs in a loop, or waits in a collective that a peer skipped), then ends as before.
    faulthandler.register(signal.SIGTERM, all_threads=False, chain=True)
    warnings.filterwarnings("ignore", message=RENAMED_WARNING, category=FutureWarning)
    try:
        student = load_student(args.student, needs)
    except MissingCode as exc:
        if rank == 0:
            print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(MISSING)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    backend, device = backend_and_device(backend or args.backend, local_rank)
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
