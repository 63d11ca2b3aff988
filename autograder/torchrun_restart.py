"""A plain training script for ``torchrun``: lesson 10's checkpoint and resume code, unchanged.

    torchrun --standalone --nproc-per-node 2 --max-restarts 1 autograder/torchrun_restart.py \\
        --directory /tmp/ckpt --out /tmp/out --steps 6 --every 2

Every worker builds the lesson's model, Adam and data stream and calls
``train_resumable(model, optimizer, stream, directory, steps, every)`` from ``--impl`` (a
module name or a ``.py`` file; default: the instructor's reference ``autograder.lessons.l10``).
With ``COURSE_FAULT=kill:<rank>:batch:<k>`` in the environment, that rank kills itself
(SIGKILL) at its k-th batch of the first attempt; torchrun's elastic agent then stops the
other workers and starts the whole group again (``TORCHELASTIC_RESTART_COUNT`` = 1), and the
new workers resume from the last committed checkpoint. A restarted worker starts from other
seeds and initial weights than the first attempt's (:func:`helpers.restart.as_restart` with the
restart count), so only a checkpoint that is loaded makes it end like an uninterrupted run. At
the end each worker writes its parameters, optimizer state, data cursor and next random draws
to ``<out>/rank<r>.pt`` and prints one line per event (``[attempt a, rank r] ...``) on stdout.

On one machine the workers are started with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``
(:func:`launch`): by default torch 2.13's workers use the elastic agent's TCPStore for their
process group, the same store for every restart attempt without a per-attempt prefix
(``_create_c10d_store`` in ``torch/distributed/rendezvous.py``); measured here, the restarted
group then failed to connect (gloo ``connectFullMesh ... Connection refused``).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.util
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the course root: helpers, autograder

from helpers import COURSE_SEED, faults  # noqa: E402
from helpers import restart as lesson  # noqa: E402
from helpers.cluster import rank_seed  # noqa: E402


def load_impl(spec: str) -> ModuleType:
    """The module holding ``train_resumable`` (and the checkpoint functions it calls)."""
    if spec.endswith(".py"):
        module_spec = importlib.util.spec_from_file_location("restart_impl", spec)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def committed_steps(directory: str) -> list[int]:
    """Steps with a commit marker, for the log (the resume logic itself is ``train_resumable``'s)."""
    if not os.path.isdir(directory):
        return []
    return sorted(int(d[len("step_"):]) for d in os.listdir(directory)
                  if d.startswith("step_") and os.path.exists(os.path.join(directory, d, "COMMITTED")))


def digest(state: dict[str, torch.Tensor]) -> str:
    """A short hash of named tensors' bytes (equal hashes: bit-identical tensors)."""
    h = hashlib.sha256()
    for name in sorted(state):
        h.update(name.encode())
        h.update(state[name].contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent


def torchrun_command(directory: str, out: str, steps: int = 6, every: int = 2, nproc: int = 2,
                     max_restarts: int = 1, impl: str = "autograder.lessons.l10") -> list[str]:
    """The ``torchrun`` command line that runs this script (``python -m torch.distributed.run``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", str(SCRIPT), "--directory", directory, "--out", out,
            "--steps", str(steps), "--every", str(every), "--impl", impl]


def launch(directory: str, out: str, fault: str | None = None, timeout: float = 300.0,
           **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run the script under ``torchrun``; ``fault`` is a ``COURSE_FAULT`` spec (e.g. ``kill:1:batch:3``).

    The launcher and its workers run in their own session; if they do not finish within
    ``timeout`` seconds the whole process group is killed and ``TimeoutExpired`` is raised.
    Each attempt's workers reuse no rendezvous store of an earlier attempt
    (``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, see the module docstring).
    """
    env = dict(os.environ, PYTHONPATH=str(ROOT), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    env.pop(faults.FAULT_ENV, None)
    if fault:
        env[faults.FAULT_ENV] = fault
    proc = subprocess.Popen(torchrun_command(directory, out, **kwargs), cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


_EVENT = re.compile(r"^\[attempt (\d+), rank (\d+)\] ")


def events(stdout: str) -> list[str]:
    """The script's own log lines, ordered by attempt and rank (each rank's lines keep their order)."""
    lines = [line for line in stdout.splitlines() if _EVENT.match(line)]
    return sorted(lines, key=lambda line: tuple(int(g) for g in _EVENT.match(line).groups()))


def say(line: str) -> None:
    """One log line in one ``write`` (atomic on a pipe: the workers share the launcher's stdout)."""
    os.write(1, (line + "\n").encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--directory", required=True, help="checkpoint directory (shared by all workers)")
    parser.add_argument("--out", required=True, help="where each worker writes its final state")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--every", type=int, default=2)
    parser.add_argument("--impl", default="autograder.lessons.l10")
    args = parser.parse_args()

    rank, attempt = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo")  # env:// : torchrun set MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    seed = rank_seed(COURSE_SEED, rank)  # as helpers.cluster seeds its ranks
    random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)
    torch.set_num_threads(1)
    tag = f"[attempt {attempt}, rank {rank}]"
    if attempt == 0 and (fault := faults.arm_from_env(rank)) is not None:
        say(f"{tag} armed: {fault.describe()}")
    committed = committed_steps(args.directory)
    say(f"{tag} world size {dist.get_world_size()}; latest committed step: {committed[-1] if committed else 'none'}")

    model = lesson.MODEL()
    lesson.as_restart(model, attempt)  # a restarted worker seeds from the restart count: other seeds and weights
    optimizer = torch.optim.Adam(model.parameters(), **lesson.ADAM)
    stream = lesson.GlobalStream()
    step = load_impl(args.impl).train_resumable(model, optimizer, stream, args.directory, args.steps, args.every)
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    state = {"step": step, "params": params, "optimizer": lesson.optimizer_tensors(optimizer),
             "cursor": stream.state_dict(), "rng": lesson.rng_draws(), "batches": stream.drawn}
    os.makedirs(args.out, exist_ok=True)
    torch.save(state, os.path.join(args.out, f"rank{rank}.pt"))
    say(f"{tag} finished at step {step} after drawing {stream.drawn} batches, cursor {state['cursor']}, "
        f"parameters sha256 {digest(params)}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
