"""Lesson 10 under torchrun: a worker killed mid-run, an elastic restart, and your checkpoints.

    python -m helpers.launch release/10_worker_failure/10_worker_failure.ipynb --nproc-per-node 2

(the command runs it with ``--max-restarts 1``, this script's ``MAX_RESTARTS``). Every worker builds
the lesson's model, Adam and data stream and calls your ``train_resumable(model, optimizer, stream,
directory, steps, every)``, which saves and resumes with your ``save_checkpoint`` and
``load_checkpoint``. In the first attempt rank ``--kill RANK:BATCH`` kills itself (SIGKILL) at its
BATCH-th batch; torchrun's elastic agent stops the other workers and starts the whole group again
(``TORCHELASTIC_RESTART_COUNT`` = 1). A restarted worker starts from other seeds and initial
weights than the first attempt's (``helpers.l10_worker_failure.as_restart``), so only a checkpoint that is
loaded makes it end like an uninterrupted run. The reference: after finishing, every worker runs
the same job again from the first attempt's seeds and weights, never interrupted, in a directory of
its own; the two runs' parameters, optimizer state, data cursor and next random draws must be
bit-identical. Each worker prints one line per event (``[attempt a, rank r] ...``). It runs on gloo
even where CUDA is available: its subject is the restart, and the lesson's model and data stream
live on the CPU.
"""
from __future__ import annotations

import hashlib
import os
import random
import re

import numpy as np
import torch
import torch.distributed as dist

from helpers import COURSE_SEED
from helpers.runtime import faults
from helpers import l10_worker_failure as lesson
from helpers.runtime.cluster import rank_seed
from helpers.launch.worker import Context, Outcome, worker

NEEDS = ("save_checkpoint", "load_checkpoint", "train_resumable")
MAX_RESTARTS = 1  # the command's default --max-restarts for this lesson: one restart after the kill


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=6, help="training steps (default 6)")
    p.add_argument("--every", type=int, default=2, help="checkpoint every this many steps (default 2)")
    p.add_argument("--kill", default="1:3", help="RANK:BATCH killed in the first attempt, or 'none' (default 1:3)")


def digest(state: dict[str, torch.Tensor]) -> str:
    """A short hash of named tensors' bytes (equal hashes: bit-identical tensors)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


EVENT = re.compile(r"^\[attempt (\d+), rank (\d+)\] ")


def events(stdout: str) -> list[str]:
    """The script's own log lines, ordered by attempt and rank (each rank's lines keep their order)."""
    lines = [line for line in stdout.splitlines() if EVENT.match(line)]
    return sorted(lines, key=lambda line: tuple(int(g) for g in EVENT.match(line).groups()))


def say(line: str) -> None:
    """One log line in one ``write`` (atomic on a pipe: the workers share the launcher's stdout)."""
    os.write(1, (line + "\n").encode())


def job(student, directory: str, ctx: Context, attempt: int) -> dict:
    """The lesson's job, as a process of attempt ``attempt`` starts it: seeds, model, optimizer, stream, training."""
    os.makedirs(directory, exist_ok=True)  # the exercises' directory exists (empty at first)
    seed = rank_seed(COURSE_SEED, ctx.rank)  # as helpers.runtime.cluster seeds its ranks
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    model = lesson.MODEL()
    lesson.as_restart(model, attempt)  # a restarted worker: other seeds and weights
    optimizer = torch.optim.Adam(model.parameters(), **lesson.ADAM)
    stream = lesson.GlobalStream()
    step = student.train_resumable(model, optimizer, stream, directory, ctx.args.steps, ctx.args.every)
    return {"step": step, "params": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "optimizer": lesson.optimizer_tensors(optimizer), "cursor": stream.state_dict(),
            "rng": lesson.rng_draws(), "batches": stream.drawn}


def differences(got: dict, want: dict) -> list[str]:
    """What differs between two runs' final states."""
    wrong = [part for part in ("step", "cursor", "rng") if got[part] != want[part]]
    for part in ("params", "optimizer"):
        if got[part].keys() != want[part].keys() or any(
                not torch.equal(got[part][k], want[part][k]) for k in want[part]):
            wrong.append(part)
    return wrong


def main(student, ctx: Context) -> Outcome:
    tag = f"[attempt {ctx.restart}, rank {ctx.rank}]"
    if ctx.restart == 0 and ctx.args.kill != "none":
        rank, batch = ctx.args.kill.split(":")
        if (fault := faults.arm_from_env(ctx.rank, {faults.FAULT_ENV: f"kill:{rank}:batch:{batch}"})) is not None:
            say(f"{tag} armed: {fault.describe()}")
    say(f"{tag} world size {ctx.world_size}; training {ctx.args.steps} steps, a checkpoint every {ctx.args.every}")
    run = job(student, os.path.join(ctx.args.out, "checkpoints"), ctx, ctx.restart)
    say(f"{tag} finished at step {run['step']} after drawing {run['batches']} batches, cursor {run['cursor']}, "
        f"parameters sha256 {digest(run['params'])}")
    with ctx.not_recorded():  # the collectives listed are the run's, not the reference's
        dist.barrier()  # every rank has finished before the reference run starts saving
        reference = job(student, os.path.join(ctx.args.out, "uninterrupted"), ctx, 0)
    say(f"{tag} uninterrupted: finished at step {reference['step']} after drawing {reference['batches']} "
        f"batches, parameters sha256 {digest(reference['params'])}")
    wrong = differences(run, reference)
    return Outcome(equal=not wrong, reference="the same job never interrupted (bit for bit)",
                   detail=(f"differs in {', '.join(wrong)}" if wrong else
                           "parameters, optimizer state, data cursor and random draws bit-identical")
                          + f" (attempt {ctx.restart}, {run['batches']} batches drawn in it)",
                   held_bytes=sum(t.numel() * t.element_size() for t in run["params"].values()),
                   notes=["held: the model's parameters (replicated)"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments, backend="gloo")
