"""Lesson 10, worker failure and restart: the references and the hidden checks (never sent into the kernel).

* **references**: a coherent checkpoint (:func:`save_checkpoint`, :func:`load_checkpoint`:
  per-rank files renamed into place, a commit marker written by rank 0 after a barrier,
  on load the latest *committed* step, agreed by an all-reduce), a resumable training loop
  (:func:`train_resumable`), an uneven-input loop with an all-reduced has-data flag
  (:func:`train_uneven`), re-sharding of per-owner optimizer state
  (:func:`reshard_optimizer_state`), Young's and Daly's checkpoint intervals and the
  expected lost time (:func:`young_interval`, :func:`daly_interval`,
  :func:`expected_lost_time`), and single-process float64 training references;
* hidden **checks** (``check_*``), one per graded cell or case, comparing what the student's
  code returns (through :func:`autograder.plain.plain`; on ranks, run by the drivers of :mod:`.drivers`
  or of :mod:`helpers.l10_worker_failure`) with a reference; the checkpoint's are
  the cases (world sizes, crashed and stale ranks, models) of :func:`helpers.l10_worker_failure.crash_test`
  and :func:`helpers.l10_worker_failure.stale_test`, whose verdict compares each restart with the same
  job run uninterrupted, since the checkpoint's layout is the student's design.

Units: seconds for times and costs, elements for sizes.

Sources of the interval formulas, reproduced exactly:

* J. W. Young, "A first order approximation to the optimum checkpoint interval",
  Communications of the ACM 17(9):530-531, 1974: ``T = sqrt(2 * delta * M)``;
* J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart
  dumps", Future Generation Computer Systems 22(3):303-312, 2006:
  ``T = sqrt(2 delta M) * (1 + sqrt(delta / (2 M)) / 3 + (delta / (2 M)) / 9) - delta`` for
  ``delta < 2 M``, else ``T = M``;

with ``delta`` the time to write one checkpoint and ``M`` the mean time between failures
of the whole job (a per-node MTBF divided by the number of nodes).
"""
from __future__ import annotations

import glob
import math
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from autograder.plain import number, plain
from helpers import COURSE_SEED
from helpers.runtime import faults
from helpers import l10_worker_failure as lesson
from helpers.runtime.cluster import ClusterError, rank_seed, run
from helpers.shared.state import SameInit, state_of
from helpers.runtime.remote import call

from .drivers import ELASTIC, elastic_on_rank, load_fresh_on_rank, membership_load_on_rank, save_twice_on_rank

TIMEOUT_S = 120.0  # per distributed call of a hidden test: generous, only a hang waits for it
HANG_TIMEOUT_S = 20.0  # an uneven-input run that hangs is stopped after this long (a correct one: < 1 s)
# Ship this module's references by value too: the tests and the stored results run them on ranks
# (save_checkpoint, train_resumable, train_uneven, ...), which then never import the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
MARKER = "COMMITTED"


# --------------------------------------------------------------------------- references


def step_dir(directory: str, step: int) -> str:
    """Where the checkpoint of ``step`` lives."""
    return os.path.join(directory, f"step_{step:08d}")


def _atomic_save(obj: Any, path: str) -> None:
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    cursor: Mapping[str, Any], scaler: torch.amp.GradScaler | None = None) -> None:
    """Collective: every rank writes its file, a barrier, rank 0 commits the step, a barrier."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    path = step_dir(directory, step)
    os.makedirs(path, exist_ok=True)
    np_state = np.random.get_state()
    state = {
        "step": step, "world_size": world_size, "cursor": dict(cursor),
        "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scaler": None if scaler is None else scaler.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:])},
    }
    _atomic_save(state, os.path.join(path, f"rank_{rank}.pt"))
    dist.barrier()
    if rank == 0:
        _atomic_save({"step": step, "world_size": world_size}, os.path.join(path, MARKER))
    dist.barrier()  # the step is committed when any rank returns


def latest_committed(directory: str) -> int | None:
    """Collective: the highest step that has a commit marker in any rank's listing of ``directory``
    (listings may lag behind on some ranks; the marker, opened by name, is there), or ``None``."""
    steps = [int(os.path.basename(os.path.dirname(m))[len("step_"):])
             for m in glob.glob(os.path.join(directory, "step_*", MARKER))]
    latest = torch.tensor([max(steps, default=-1)])
    dist.all_reduce(latest, op=dist.ReduceOp.MAX)
    return None if latest.item() < 0 else int(latest.item())


def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None = None) -> dict[str, Any] | None:
    """Restore the latest committed checkpoint; ``{"step", "cursor", "world_size"}`` or ``None``."""
    step = latest_committed(directory)
    if step is None:
        return None
    rank, world_size = dist.get_rank(), dist.get_world_size()
    saved_world = torch.load(os.path.join(step_dir(directory, step), MARKER), weights_only=True)["world_size"]
    same = saved_world == world_size
    state = torch.load(os.path.join(step_dir(directory, step), f"rank_{rank if same else 0}.pt"), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    if same:
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        name, key, *rest = state["rng"]["numpy"]
        np.random.set_state((name, key.numpy().astype(np.uint32), *rest))
    return {"step": state["step"], "cursor": state["cursor"], "world_size": saved_world}


def train_resumable(model: nn.Module, optimizer: torch.optim.Optimizer, stream: lesson.GlobalStream,
                    directory: str, num_steps: int, every: int) -> int:
    """Resume from the latest committed checkpoint, train to ``num_steps``, checkpoint every ``every`` steps."""
    return _train(model, optimizer, stream, directory, num_steps, every, load_checkpoint, old_denominator=False)


def _train(model: nn.Module, optimizer: torch.optim.Optimizer, stream: lesson.GlobalStream, directory: str,
           num_steps: int, every: int, load_fn: Callable[..., Any], old_denominator: bool) -> int:
    """:func:`train_resumable` with another ``load_fn``, or dividing by the checkpoint's world size."""
    meta = load_fn(directory, model, optimizer)
    step = 0
    if meta is not None:
        step = meta["step"]
        stream.load_state_dict(meta["cursor"])
    rank, world_size = dist.get_rank(), dist.get_world_size()
    divisor = meta["world_size"] if old_denominator and meta is not None else world_size
    while step < num_steps:
        x, y = stream.next_batch()
        per_rank = len(x) // world_size
        rows = slice(rank * per_rank, (rank + 1) * per_rank)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x[rows]), y[rows]).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad.div_(divisor)
        optimizer.step()
        step += 1
        if step % every == 0:
            save_checkpoint(directory, step, model, optimizer, stream.state_dict())
    return step


def train_uneven(model: nn.Module, optimizer: torch.optim.Optimizer,
                 batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> int:
    """Step while any rank has a batch; each step's gradient is the mean over all ranks' elements."""
    params = list(model.parameters())
    steps = 0
    while True:
        has = torch.tensor([1 if steps < len(batches) else 0])
        dist.all_reduce(has)
        if has.item() == 0:
            return steps
        optimizer.zero_grad()
        if steps < len(batches):
            x, y = batches[steps]
            nn.functional.mse_loss(model(x), y, reduction="sum").backward()
            count = torch.tensor([y.numel()], dtype=torch.float64)
        else:
            count = torch.zeros(1, dtype=torch.float64)
        dist.all_reduce(count)
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
            p.grad.div_(count)
        optimizer.step()
        steps += 1


def reshard_optimizer_state(shards: Sequence[Mapping[int, Any]], new_owners: Sequence[int],
                            new_world_size: int) -> list[dict[int, Any]]:
    """Per-owner state of N old owners regrouped by ``new_owners`` into ``new_world_size`` shards."""
    merged: dict[int, Any] = {}
    for shard in shards:
        for index, state in shard.items():
            if index in merged:
                raise ValueError(f"parameter {index} has state in two shards")
            merged[index] = state
    out: list[dict[int, Any]] = [{} for _ in range(new_world_size)]
    for index in sorted(merged):
        out[new_owners[index]][index] = merged[index]
    return out


def job_mtbf(node_mtbf_s: float, num_nodes: int) -> float:
    """Mean time between failures of a job on ``num_nodes`` independent nodes (seconds)."""
    return node_mtbf_s / num_nodes


def young_interval(checkpoint_s: float, node_mtbf_s: float, num_nodes: int) -> float:
    """Young (1974): compute time between checkpoints sqrt(2 delta M), M the job's MTBF (seconds)."""
    return math.sqrt(2 * checkpoint_s * job_mtbf(node_mtbf_s, num_nodes))


def daly_interval(checkpoint_s: float, node_mtbf_s: float, num_nodes: int) -> float:
    """Daly (2006), higher order: sqrt(2dM)(1 + sqrt(d/2M)/3 + (d/2M)/9) - d for d < 2M, else M (seconds)."""
    m = job_mtbf(node_mtbf_s, num_nodes)
    if checkpoint_s >= 2 * m:
        return m
    r = checkpoint_s / (2 * m)
    return math.sqrt(2 * checkpoint_s * m) * (1 + math.sqrt(r) / 3 + r / 9) - checkpoint_s


def expected_lost_time(run_s: float, interval_s: float, checkpoint_s: float, restart_s: float,
                       node_mtbf_s: float, num_nodes: int) -> float:
    """First-order expected seconds lost over ``run_s`` of work: checkpoint writes plus replay and restart."""
    failures = run_s / job_mtbf(node_mtbf_s, num_nodes)
    return run_s / interval_s * checkpoint_s + failures * (interval_s / 2 + restart_s)


def float64_training(model_fn: Callable[[], nn.Module], stream_kwargs: Mapping[str, Any], num_steps: int,
                     lr: float, momentum: float) -> dict[str, torch.Tensor]:
    """Single-process float64 SGD with momentum on the full global batches of a noise-free model."""
    model = model_fn()
    model.noisy = False
    stream = lesson.GlobalStream(**stream_kwargs)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for _ in range(num_steps):
        x, y = stream.next_batch()
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return state_of(model)


def uneven_reference(per_rank: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]], lr: float,
                     model_fn: Callable[[], nn.Module] = lesson.MODEL) -> dict[str, torch.Tensor]:
    """Single-process float64 SGD: step ``t`` on the rows of every rank's batch ``t`` (mean over elements)."""
    model = model_fn()
    model.noisy = False
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for t in range(max(len(b) for b in per_rank)):
        parts = [b[t] for b in per_rank if t < len(b)]
        x, y = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return state_of(model)


# --------------------------------------------------------------------------- hidden checks: checkpoint


class Scratch:
    """A temporary directory for one check, made and removed in the kernel (files there are its code's)."""

    def __enter__(self) -> str:
        self.path = call(tempfile.mkdtemp, prefix="course-l10-")
        return self.path

    def __exit__(self, *exc: Any) -> None:
        call(shutil.rmtree, self.path, ignore_errors=True)


def _run(fn: Callable[..., Any], *args: Any, world_size: int, timeout: float = TIMEOUT_S, **kwargs: Any) -> Any:
    return plain(run(fn, *args, world_size=world_size, timeout=timeout, **kwargs), "the per-rank results")


ROUND_TRIP_CASES = {
    # case: (world size, steps before the save, with a GradScaler, model, Adam hyper-parameters)
    "3 ranks, Adam, GradScaler": (3, 3, True, SameInit(lesson.NoisyMLP, seed=21, kwargs={"hidden": 7}),
                                  dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.01)),
    "3 ranks, no scaler, wider model": (3, 2, False, SameInit(lesson.NoisyMLP, seed=23, kwargs={"hidden": 16}),
                                        lesson.ADAM),
}


def check_round_trip(save_fn: Callable[..., Any], load_fn: Callable[..., Any], case: str) -> None:
    """Case ``case`` of :data:`ROUND_TRIP_CASES`: everything saved comes back bit for bit on every rank."""
    world_size, steps, with_scaler, model_fn, hyper = ROUND_TRIP_CASES[case]
    with Scratch() as directory:
        out = _run(lesson.round_trip_on_rank, save_fn, load_fn, directory, steps, with_scaler, model_fn, hyper,
                   world_size=world_size)
    lesson.assert_round_trip(out, case)


def check_nothing_committed(save_fn: Callable[..., Any], load_fn: Callable[..., Any], world_size: int) -> None:
    """An empty directory, then a crash during the very first save (the last rank killed before its
    first write, the others having run as far as they can): load returns None on every rank and
    changes nothing, and the restarted job (a new run) saves and loads its own steps."""
    with Scratch() as directory:
        out = _run(load_fresh_on_rank, load_fn, directory, world_size=world_size)
    assert all(r["meta"] is None for r in out), \
        f"{world_size} ranks, an empty directory: load_checkpoint returned {[r['meta'] for r in out]}, expected None"
    crash = lesson.Crash(world_size - 1, "before", 1)
    where = f"{world_size} ranks, rank {world_size - 1} killed before its first write of the first save (step 2)"
    with Scratch() as directory, Scratch() as flags, Scratch() as restart_flags:
        try:
            _run(lesson.job_on_rank, save_fn, load_fn, directory, flags, crash=crash, watch_step=lesson.SAVES[0],
                 world_size=world_size)
        except ClusterError:
            pass
        lesson.assert_resumed(*lesson.restart_attempt(save_fn, load_fn, directory, restart_flags, where,
                                               world_size=world_size),
                              [], where, [None], "no step was ever complete: load_checkpoint returns None")


def check_membership_load(save_fn: Callable[..., Any], load_fn: Callable[..., Any], old_world_size: int,
                          new_world_size: int) -> None:
    """``old_world_size`` ranks save steps 2 and 4, ``new_world_size`` ranks load: step 4, rank 0's model,
    the world size that wrote it, and the random generators left as they were."""
    with Scratch() as directory:
        saved = _run(save_twice_on_rank, save_fn, directory, world_size=old_world_size)
        out = _run(membership_load_on_rank, load_fn, directory, world_size=new_world_size)
    for rank, r in enumerate(out):
        where, meta = f"saved by {old_world_size} ranks, loaded by {new_world_size}: rank {rank}", r["meta"]
        assert isinstance(meta, dict) and meta.get("step") == 4, f"{where}: load_checkpoint returned {meta!r}"[:300]
        assert meta.get("world_size") == old_world_size, \
            f"{where}: load_checkpoint says world size {meta.get('world_size')!r}; " \
            f"{old_world_size} ranks wrote the checkpoint"
        lesson.assert_states_equal(r["params"], saved[0][4],
                                   f"{where}: model (after a membership change every rank loads rank 0's state)")
        assert r["rng"] == r["rng_untouched"], \
            f"{where}: the random generators changed: the world size changed, so the old ranks' generator " \
            "states do not belong to the new ranks and must be left as they are"


CRASH_CASES = {
    # case: (world size, ranks killed, with a GradScaler, model, Adam hyper-parameters)
    "3 ranks, every rank, GradScaler": (3, None, True, SameInit(lesson.NoisyMLP, seed=27, kwargs={"hidden": 9}),
                                        dict(lr=0.03, betas=(0.85, 0.97), eps=1e-7, weight_decay=0.0)),
    "4 ranks, ranks 0 and 3": (4, [0, 3], False, SameInit(lesson.NoisyMLP, seed=29, kwargs={"hidden": 5}),
                               lesson.ADAM),
}


def check_crashes(save_fn: Callable[..., Any], load_fn: Callable[..., Any], case: str) -> None:
    """Case ``case`` of :data:`CRASH_CASES`: the save of step 4 killed at every crash point of the chosen
    ranks (:func:`helpers.l10_worker_failure.crash_test`); every restart resumes coherently and ends as the
    uninterrupted job."""
    world_size, victims, with_scaler, model_fn, hyper = CRASH_CASES[case]
    lesson.crash_test(save_fn, load_fn, world_size, victims, with_scaler=with_scaler, model_fn=model_fn,
                      hyper=hyper)


def check_stale_listing(save_fn: Callable[..., Any], load_fn: Callable[..., Any], world_size: int,
                        stale_rank: int) -> None:
    """Steps 2 and 4 committed; on the restart, rank ``stale_rank`` lists the directory as it was after
    step 2: every rank resumes from the same committed step and ends as the uninterrupted job."""
    lesson.stale_test(save_fn, load_fn, world_size, stale_rank)


# --------------------------------------------------------------------------- hidden checks: restart


def reference_run(world_size: int, num_steps: int, stream_kwargs: Mapping[str, Any] | None = None,
                  model_fn: Callable[[], nn.Module] = lesson.MODEL,
                  hyper: Mapping[str, Any] = lesson.ADAM) -> list[dict[str, Any]]:
    """What :func:`helpers.l10_worker_failure.resumable_on_rank` returns on every rank for a correct, uninterrupted
    ``train_resumable``, computed in this process: each rank's forward pass on its rows with its own
    random generators (seeded as :func:`helpers.runtime.cluster.run` seeds rank ``r``), the gradients summed
    over the ranks and divided by ``world_size``, one Adam step."""
    def rng() -> tuple[Any, Any, Any]:
        return torch.get_rng_state(), np.random.get_state(), random.getstate()

    def set_rng(state: tuple[Any, Any, Any]) -> None:
        torch.set_rng_state(state[0]), np.random.set_state(state[1]), random.setstate(state[2])

    outside = rng()
    try:
        states = []
        for r in range(world_size):
            seed = rank_seed(COURSE_SEED, r)
            torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
            states.append(rng())
        model = model_fn()
        params = list(model.parameters())
        optimizer = torch.optim.Adam(params, **hyper)
        stream = lesson.GlobalStream(**dict(stream_kwargs or {}))
        for _ in range(num_steps):
            x, y = stream.next_batch()
            rows = len(x) // world_size
            total = [torch.zeros_like(p) for p in params]
            for r in range(world_size):
                set_rng(states[r])
                part = slice(r * rows, (r + 1) * rows)
                loss = nn.functional.mse_loss(model(x[part]), y[part])
                for t, g in zip(total, torch.autograd.grad(loss, params)):
                    t.add_(g)
                states[r] = rng()
            for p, t in zip(params, total):
                p.grad = t / world_size
            optimizer.step()
        out = []
        for r in range(world_size):
            set_rng(states[r])
            out.append({"returned": num_steps, "params": state_of(model),
                        "optimizer": lesson.optimizer_tensors(optimizer),
                        "cursor": stream.state_dict(), "rng": lesson.rng_draws(), "batches": num_steps})
        return out
    finally:
        set_rng(outside)


def assert_like_reference(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]], case: str) -> None:
    """An uninterrupted run equals :func:`reference_run`: the same steps, batches, cursor and random
    draws, parameters and Adam state within float64 rounding (the ranks may sum in another order)."""
    for rank, (g, w) in enumerate(zip(got, want)):
        where = f"{case}, rank {rank}"
        assert g["returned"] == w["returned"], f"{where}: returned {g['returned']!r}, expected {w['returned']}"
        assert g["batches"] == w["batches"], \
            f"{where}: drew {g['batches']} batches for {w['returned']} steps: one global batch per step, no more"
        assert g["cursor"] == w["cursor"], f"{where}: the data stream ends at {g['cursor']}, expected {w['cursor']}"
        assert g["rng"] == w["rng"], \
            f"{where}: the random generators end in another state than a correct run's: each rank runs the " \
            "forward pass once per step, on its own rows of the global batch"
        for part in ("params", "optimizer"):
            assert sorted(g[part]) == sorted(w[part]), f"{where}: {part} keys {sorted(g[part])}"
            for name, value in w[part].items():
                assert torch.allclose(g[part][name].double(), value.double(), rtol=1e-9, atol=1e-12), \
                    f"{where}: {part} {name} differs from the reference by " \
                    f"{(g[part][name].double() - value.double()).abs().max().item():.3g}: each step's gradient " \
                    "is the mean squared error's over the global batch, with each rank computing its own rows"


def _first_run(train_fn: Callable[..., Any], directory: str, world_size: int, num_steps: int, every: int,
               stream_kwargs: Mapping[str, Any], case: str) -> list[dict[str, Any]]:
    """The student's uninterrupted run, checked against the reference; then restarted with the same
    ``num_steps``: it resumes from the last checkpoint (the multiple of ``every`` at or below
    ``num_steps``) and ends as the same run."""
    first = _run(lesson.resumable_on_rank, train_fn, directory, num_steps, every, stream_kwargs=stream_kwargs,
                 world_size=world_size)
    assert_like_reference(first, reference_run(world_size, num_steps, stream_kwargs), f"{case}, uninterrupted")
    again = _run(lesson.resumable_on_rank, train_fn, directory, num_steps, every, stream_kwargs=stream_kwargs,
                 attempt=1, world_size=world_size)
    lesson.assert_same_run(again, first, f"{case}, restarted once it had finished (a checkpoint after every step "
                           f"whose count is a multiple of {every})", resumed_from=num_steps // every * every)
    return first


def check_restart_after_kill(train_fn: Callable[..., Any], world_size: int, kill_rank: int, kill_batch: int,
                             num_steps: int, every: int) -> None:
    """Kill ``kill_rank`` (SIGKILL) at its ``kill_batch``-th batch, restart the whole group as a new
    attempt (other seeds and weights), finish: bit-identical to
    the run that was never interrupted, which itself matches the reference; only the batches after the
    committed step drawn again."""
    stream_kwargs = dict(batch_size=2 * world_size)
    case = f"{world_size} ranks, rank {kill_rank} killed at batch {kill_batch}, checkpoint every {every}"
    with Scratch() as directory:
        want = _first_run(train_fn, directory, world_size, num_steps, every, stream_kwargs, case)
    committed = (kill_batch - 1) // every * every
    with Scratch() as directory:
        report = faults.run_with_faults(lesson.resumable_on_rank, train_fn, directory, num_steps, every,
                                        stream_kwargs=stream_kwargs,
                                        faults=[faults.kill(kill_rank, "batch", kill_batch)],
                                        world_size=world_size, timeout=TIMEOUT_S)
        assert report.error is not None, f"{case}: the run finished although rank {kill_rank} was killed"
        got = _run(lesson.resumable_on_rank, train_fn, directory, num_steps, every, stream_kwargs=stream_kwargs,
                   attempt=1, world_size=world_size)
    lesson.assert_same_run(got, want, case, resumed_from=committed)


def check_stop_and_resume(train_fn: Callable[..., Any], world_size: int, stops: Sequence[int], every: int) -> None:
    """Stopped after each of ``stops`` steps (no checkpoint at some of them), each restart a new attempt,
    resumed: the same as one run, which matches the reference and commits every ``every`` steps."""
    num_steps = stops[-1]
    case = f"{world_size} ranks stopped at steps {list(stops[:-1])}, every {every}"
    with Scratch() as directory:
        want = _first_run(train_fn, directory, world_size, num_steps, every, {}, case)
    with Scratch() as directory:
        for attempt, stop in enumerate(stops):
            got = _run(lesson.resumable_on_rank, train_fn, directory, stop, every, attempt=attempt,
                       world_size=world_size)
    lesson.assert_same_run(got, want, case, resumed_from=stops[-2] // every * every)


def check_elastic(train_fn: Callable[..., Any], old_world_size: int, new_world_size: int) -> None:
    """Stop at step 5 on ``old_world_size`` ranks (checkpoint at 4), resume on ``new_world_size``
    ranks to step 8: the global objective must not change (float64 SGD reference)."""
    case = f"{old_world_size} ranks to step 5, restarted on {new_world_size} ranks to step 8"
    with Scratch() as directory:
        _run(elastic_on_rank, train_fn, directory, 5, 2, 0, world_size=old_world_size)
        out = _run(elastic_on_rank, train_fn, directory, 8, 2, 1, world_size=new_world_size)
    want = float64_training(lesson.MODEL, ELASTIC["stream"], 8, ELASTIC["lr"], ELASTIC["momentum"])
    for rank, r in enumerate(out):
        assert r["returned"] == 8, f"{case}, rank {rank}: returned {r['returned']!r}, expected 8"
        assert r["batches"] == 4, f"{case}, rank {rank}: the restart drew {r['batches']} batches; resuming from " \
                                  "the committed step 4 it needs 4: it did not continue from the checkpoint"
        for name, w in want.items():
            g = r["params"][name]
            assert torch.allclose(g, w, rtol=1e-10, atol=1e-12), \
                f"{case}, rank {rank}: {name} differs from single-process float64 SGD on the global batches by " \
                f"{(g - w).abs().max().item():.3g} (ratio of the steps {scale_hint(g, w)}): after a membership " \
                "change the gradient must still be the mean over the global batch, with the new world size"


def scale_hint(got: torch.Tensor, want: torch.Tensor) -> str:
    """A short description of how far apart two tensors are, relative to ``want``."""
    return f"{(got.norm() / want.norm()).item():.3f}" if want.norm() > 0 else "n/a"


# --------------------------------------------------------------------------- hidden checks: uneven inputs


UNEVEN_CASES = {
    # case: (per-rank batch counts, batch sizes in rows, seed, learning rate)
    "3 ranks, 3/5/0 batches": ([3, 5, 0], [2, 3, 1], 31, 0.2),
    "4 ranks, 2/0/4/1 batches": ([2, 0, 4, 1], [3, 1, 2], 37, 0.1),
    "3 ranks, 3/2/3 batches": ([3, 2, 3], [2, 3, 1], 43, 0.2),  # every rank has data in the first steps
}


def check_uneven(train_fn: Callable[..., Any], case: str) -> None:
    """Case ``case`` of :data:`UNEVEN_CASES` against single-process float64 SGD; a hang is a failure."""
    counts, sizes, seed, lr = UNEVEN_CASES[case]
    per_rank = lesson.uneven_batches(counts, sizes, seed)
    try:
        out = _run(lesson.uneven_on_rank, train_fn, per_rank, lr, world_size=len(counts), timeout=HANG_TIMEOUT_S)
    except ClusterError as exc:
        first = str(exc).splitlines()[0]
        raise AssertionError(f"{case}: the run did not complete ({type(exc).__name__}: {first}). A rank that runs "
                             "out of data must keep taking part in every collective until no rank has data") from None
    lesson.assert_uneven(out, max(counts), uneven_reference(per_rank, lr), case, rtol=1e-10)


# --------------------------------------------------------------------------- hidden checks: re-sharding


def _adam_state(numels: Sequence[int], steps: int, seed: int, frozen: Sequence[int] = ()) -> dict[int, dict]:
    """Real ``torch.optim.Adam`` state of parameters of ``numels`` elements after ``steps`` steps."""
    g = torch.Generator().manual_seed(seed)
    params = [nn.Parameter(torch.randn(n, generator=g)) for n in numels]
    opt = torch.optim.Adam([p for i, p in enumerate(params) if i not in frozen], lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        sum((p * torch.randn(p.shape, generator=g)).sum() for i, p in enumerate(params) if i not in frozen).backward()
        opt.step()
    index = {id(p): i for i, p in enumerate(params)}
    return {index[id(p)]: {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
            for p, s in opt.state.items()}


def _split(state: Mapping[int, dict], owners: Sequence[int], world_size: int) -> list[dict[int, dict]]:
    out: list[dict[int, dict]] = [{} for _ in range(world_size)]
    for i, s in state.items():
        out[owners[i]][i] = s
    return out


RESHARD_CASES = [
    # (numels, old owners, old N, new owners, new N, frozen parameters)
    ([12, 5, 7, 3, 9, 4], [0, 1, 2, 3, 2, 1], 4, [0, 1, 2, 1, 0, 2], 3, ()),
    ([8, 8, 2, 6, 1], [0, 1, 0, 2, 1], 3, [3, 0, 1, 2, 2], 4, (2,)),
    ([4, 4, 4], [0, 1, 1], 2, [0, 0, 0], 1, ()),
    ([6, 3, 2, 9, 5, 5, 1], [2, 0, 1, 2, 1, 0, 1], 3, [1, 1, 0, 0, 1, 0, 1], 2, (6,)),
    ([7, 2], [0, 0], 3, [4, 1], 5, ()),
    ([5, 3, 4, 2], [0, 1, 0, 1], 2, [0, 1, 1, 0], 3, ()),  # the highest new rank owns nothing
]


def check_reshard(fn: Callable[..., Any]) -> None:
    """Every case of :data:`RESHARD_CASES`: equal to consolidating and re-partitioning; duplicates refused."""
    for k, (numels, old, old_n, new, new_n, frozen) in enumerate(RESHARD_CASES):
        state = _adam_state(numels, 2, seed=41 + k, frozen=frozen)
        case = f"{old_n} -> {new_n} owners, new owners {new}"
        got = plain(fn(_split(state, old, old_n), list(new), new_n), f"reshard_optimizer_state(...) ({case})")
        want = _split(state, new, new_n)
        assert type(got) is list and len(got) == new_n, f"{case}: expected a list of {new_n} shards, got {got!r}"[:300]
        for r in range(new_n):
            assert type(got[r]) is dict and sorted(got[r]) == sorted(want[r]), \
                f"{case}: new rank {r} holds state of parameters " \
                f"{sorted(got[r]) if type(got[r]) is dict else got[r]}," \
                f" expected {sorted(want[r])} (each parameter with state exactly once, on its new owner)"
            for i, s in want[r].items():
                assert sorted(got[r][i]) == sorted(s), f"{case}: parameter {i} has keys {sorted(got[r][i])}"
                for key, value in s.items():
                    assert torch.equal(torch.as_tensor(got[r][i][key]), torch.as_tensor(value)), \
                        f"{case}: parameter {i}'s {key} changed on the way"
    state = _adam_state([3, 3, 3], 1, seed=99)
    shards = [{0: state[0], 1: state[1]}, {1: state[1], 2: state[2]}]
    try:
        fn(shards, [0, 0, 1], 2)
    except ValueError:
        pass
    else:
        raise AssertionError("parameter 1 has state in two old shards (a corrupt checkpoint): expected ValueError")


# --------------------------------------------------------------------------- hidden checks: intervals

HOUR, DAY, YEAR = 3600.0, 86400.0, 365.0 * 86400.0
INTERVAL_CASES = [  # (checkpoint seconds, per-node MTBF seconds, nodes)
    (60.0, 5 * YEAR, 1024), (300.0, 2 * YEAR, 4096), (10.0, 1 * YEAR, 8), (120.0, 0.5 * YEAR, 16384),
    (30.0, 3 * DAY, 1), (600.0, 10 * YEAR, 100_000),
    (3600.0, 1 * DAY, 64), (900.0, 1 * HOUR, 8),  # the last two: delta >= 2M
]
LOST_CASES = [  # (run seconds, interval, checkpoint, restart, per-node MTBF, nodes)
    (30 * DAY, 3600.0, 60.0, 600.0, 5 * YEAR, 1024), (7 * DAY, 1200.0, 30.0, 120.0, 2 * YEAR, 4096),
    (DAY, 600.0, 5.0, 60.0, 1 * YEAR, 8), (90 * DAY, 7200.0, 300.0, 900.0, 3 * YEAR, 16384),
    (10 * DAY, 7000.0, 45.0, 300.0, 2 * YEAR, 2048),  # the run is not a whole number of intervals
]


def check_intervals(young: Callable[..., Any], daly: Callable[..., Any], lost: Callable[..., Any]) -> None:
    """Young (CACM 1974) and Daly (FGCS 2006) reproduced exactly, with M = per-node MTBF / nodes."""
    for delta, mtbf, n in INTERVAL_CASES:
        for fn, ref, source in ((young, young_interval, "Young 1974"), (daly, daly_interval, "Daly 2006")):
            call = f"{fn.__name__}({delta}, {mtbf}, {n})"
            got, want = number(fn(delta, mtbf, n), call), ref(delta, mtbf, n)
            assert math.isclose(got, want, rel_tol=1e-9), \
                f"{call} = {got}, {source} gives {want} (M = {mtbf} / {n} s, the whole job's MTBF)"
    for case in LOST_CASES:
        call = f"expected_lost_time{case}"
        got, want = number(lost(*case), call), expected_lost_time(*case)
        assert math.isclose(got, want, rel_tol=1e-9), f"{call} = {got}, expected {want}"
