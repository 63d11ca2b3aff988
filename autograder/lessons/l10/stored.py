"""Lesson 10, worker failure and restart: the producers of the chapter's stored data (``STORED``, ``STORED_ROUNDING``).

What chapter 10, its explorer and the visible tests read from ``helpers/stored``: the visible uneven-input
test's float64 reference, the expected lost time against the checkpoint interval (figure and explorer grid),
the restart that forgets one thing, the elastic restart's denominator, the has-data-flag run's collectives
and the log of the student's torchrun command; each measured with the references of :mod:`.verdicts`.
Units: seconds for times and costs, elements for sizes.
"""
from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from autograder.store import Rounding
from helpers import l10_worker_failure as lesson
from helpers.runtime.cluster import run
from helpers.shared.data import tensors_to_json
from helpers.shared.state import state_of

from .drivers import ELASTIC
from .verdicts import (
    DAY, TIMEOUT_S, YEAR, Scratch, _run, _train, daly_interval, expected_lost_time, float64_training, job_mtbf,
    load_checkpoint, train_uneven, uneven_reference, young_interval)

ROOT = Path(__file__).resolve().parents[3]  # the course root, where python -m helpers.launch runs
# Ship this module's rank-side functions by value (restart_ablation and elastic_denominator run
# _lossy_on_rank and _elastic_variant_on_rank on ranks): a rank then never imports the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- stored results

VISIBLE_UNEVEN = {"test_train_uneven": ([2, 3, 0], [2, 1, 3], 17, 0.2)}
FIGURE_NODES = [64, 512, 4096]
FIGURE = dict(checkpoint_s=60.0, node_mtbf_s=5 * YEAR, restart_s=300.0, run_s=30 * DAY)
EXPLORER_CHECKPOINT_S = [10.0, 30.0, 60.0, 120.0, 300.0, 600.0]
EXPLORER_MTBF_YEARS = [0.5, 1.0, 2.0, 5.0, 10.0]
EXPLORER_NODES = [8, 64, 512, 4096, 16384]


def _intervals_grid(lo: float, hi: float, count: int = 60) -> list[float]:
    return [lo * (hi / lo) ** (k / (count - 1)) for k in range(count)]


def visible_references() -> dict[str, Any]:
    """float64 single-process SGD after the visible uneven-input test's steps."""
    return {case: tensors_to_json(uneven_reference(lesson.uneven_batches(counts, sizes, seed), lr))
            for case, (counts, sizes, seed, lr) in VISIBLE_UNEVEN.items()}


def interval_figure() -> dict[str, Any]:
    """Expected lost time (s) over a 30-day run vs interval, for a few cluster sizes, with the optima."""
    p = FIGURE
    intervals = _intervals_grid(60.0, 6 * 3600.0)
    curves = {}
    for n in FIGURE_NODES:
        curves[str(n)] = {
            "lost_s": [expected_lost_time(p["run_s"], t, p["checkpoint_s"], p["restart_s"], p["node_mtbf_s"], n)
                       for t in intervals],
            "young_s": young_interval(p["checkpoint_s"], p["node_mtbf_s"], n),
            "daly_s": daly_interval(p["checkpoint_s"], p["node_mtbf_s"], n),
            "job_mtbf_s": job_mtbf(p["node_mtbf_s"], n),
        }
        t = curves[str(n)]["young_s"]
        curves[str(n)]["lost_at_young_s"] = expected_lost_time(p["run_s"], t, p["checkpoint_s"], p["restart_s"],
                                                               p["node_mtbf_s"], n)
    return dict(p, intervals_s=intervals, curves=curves)


def interval_explorer() -> dict[str, Any]:
    """Young and Daly intervals and lost-time curves on a grid of checkpoint cost, per-node MTBF and nodes."""
    intervals = _intervals_grid(10.0, 24 * 3600.0, 50)
    grid = {}
    for d in EXPLORER_CHECKPOINT_S:
        for years in EXPLORER_MTBF_YEARS:
            for n in EXPLORER_NODES:
                mtbf = years * YEAR
                young = young_interval(d, mtbf, n)
                grid[f"{d:g}|{years:g}|{n}"] = {
                    "young_s": young, "daly_s": daly_interval(d, mtbf, n),
                    "lost_at_young_s": expected_lost_time(FIGURE["run_s"], young, d, FIGURE["restart_s"], mtbf, n),
                    "lost_s": [round(expected_lost_time(FIGURE["run_s"], t, d, FIGURE["restart_s"], mtbf, n), 3)
                               for t in intervals]}
    return {"checkpoint_s": EXPLORER_CHECKPOINT_S, "mtbf_years": EXPLORER_MTBF_YEARS, "nodes": EXPLORER_NODES,
            "run_s": FIGURE["run_s"], "restart_s": FIGURE["restart_s"], "intervals_s": intervals, "grid": grid}


def _rounded_diff(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor]) -> float:
    """Largest absolute difference, 3 significant digits; below 1e-12 (float64 rounding) stored as 0."""
    diff = max((got[k] - want[k]).abs().max().item() for k in want)
    return 0.0 if diff < 1e-12 else float(f"{diff:.3g}")


class _LossyLoad:
    """:func:`load_checkpoint`, then forget one thing a restart needs (for the chapter's table)."""

    def __init__(self, missing: str) -> None:
        self.missing = missing

    def __call__(self, directory: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        meta = load_checkpoint(directory, model, optimizer)
        if meta is None or self.missing == "nothing":
            return meta
        if self.missing == "optimizer state":
            optimizer.state.clear()
        elif self.missing == "RNG state":
            seed = 1000 * 1234 + dist.get_rank()  # what a fresh process seeds itself with
            torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
        elif self.missing == "data cursor":
            meta = dict(meta, cursor={"epoch": 0, "index": 0})
        return meta


def _lossy_on_rank(missing: str, directory: str, num_steps: int) -> dict[str, Any]:
    train = lambda *args: _train(*args, load_fn=_LossyLoad(missing), old_denominator=False)  # noqa: E731
    return lesson.resumable_on_rank(train, directory, num_steps, 4)


RESTART_MISSING = ["nothing", "optimizer state", "RNG state", "data cursor"]


def restart_ablation() -> dict[str, Any]:
    """3 ranks stopped at step 6 (checkpoint at 4), resumed to 10: largest parameter difference
    from the uninterrupted run, per rank, when the restart forgets one thing."""
    with Scratch() as directory:
        want = _run(_lossy_on_rank, "nothing", directory, 10, world_size=3)
    out = {}
    for missing in RESTART_MISSING:
        with Scratch() as directory:
            _run(_lossy_on_rank, missing, directory, 6, world_size=3)
            got = _run(_lossy_on_rank, missing, directory, 10, world_size=3)
        out[missing] = [_rounded_diff(g["params"], w["params"]) for g, w in zip(got, want)]
    return {"stopped_at": 6, "checkpoint_at": 4, "num_steps": 10, "world_size": 3, "max_abs_diff": out}


def _elastic_variant_on_rank(old_denominator: bool, directory: str, num_steps: int) -> dict[str, Any]:
    model = lesson.MODEL()
    model.noisy = False
    optimizer = torch.optim.SGD(model.parameters(), lr=ELASTIC["lr"], momentum=ELASTIC["momentum"])
    stream = lesson.GlobalStream(**ELASTIC["stream"])
    _train(model, optimizer, stream, directory, num_steps, 2, load_checkpoint, old_denominator)
    return state_of(model)


def elastic_denominator() -> dict[str, Any]:
    """4 ranks to step 5 (checkpoint at 4), then 3 ranks to step 8: distance from float64 SGD,
    dividing by the current world size or by the checkpoint's."""
    want = float64_training(lesson.MODEL, ELASTIC["stream"], 8, ELASTIC["lr"], ELASTIC["momentum"])
    out = {}
    for name, old in (("current world size (3)", False), ("checkpoint's world size (4)", True)):
        with Scratch() as directory:
            _run(_elastic_variant_on_rank, old, directory, 5, world_size=4)
            got = _run(_elastic_variant_on_rank, old, directory, 8, world_size=3)[0]
        out[name] = _rounded_diff(got, want)
    return {"old_world_size": 4, "new_world_size": 3, "checkpoint_at": 4, "num_steps": 8, "max_abs_diff": out}


def uneven_flag_run() -> dict[str, Any]:
    """The has-data-flag loop on the chapter's uneven case: steps and parameters on gloo, collectives per rank."""
    counts, sizes, seed, lr = VISIBLE_UNEVEN["test_train_uneven"]
    out, ledger = run(lesson.uneven_on_rank, train_uneven, lesson.uneven_batches(counts, sizes, seed), lr,
                      world_size=len(counts), timeout=TIMEOUT_S, ledger=True)
    return {"counts": counts, "sizes": sizes, "seed": seed, "lr": lr, "steps": [r["steps"] for r in out],
            "params": tensors_to_json(out[0]["params"]),
            "collectives_per_rank": [ledger.count(rank=k) for k in range(len(counts))]}


TORCHRUN_COMMAND = "python -m helpers.launch release/10_worker_failure/10_worker_failure.ipynb --nproc-per-node 2"


def torchrun_log() -> dict[str, Any]:
    """The lesson's torchrun script run on the source notebook's solutions by the student's command (2 workers,
    rank 1 killed at its 3rd batch, 1 restart): its event lines, the uninterrupted reference's, and the verdict."""
    from autograder.course import source_notebook
    from helpers.l10_worker_failure import launch as script

    with Scratch() as directory:
        proc = subprocess.run([sys.executable, "-m", "helpers.launch", str(source_notebook("10_worker_failure")),
                               "--nproc-per-node", "2", "--workdir", directory],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = script.events(proc.stdout)
    return {"command": TORCHRUN_COMMAND, "exit_code": proc.returncode,
            "lines": [line for line in lines if "uninterrupted" not in line],
            "uninterrupted_lines": [line for line in lines if "uninterrupted" in line],
            "verdict": next((line for line in proc.stdout.splitlines() if "EQUAL to" in line), "")}


# The log's hash of float32 parameters differs between CPUs; within one run the killed and the
# uninterrupted runs' hashes agree (lesson 10's launch.py compares them), which is what the chapter shows.
STORED_ROUNDING = {"10_torchrun_log": Rounding(masked=r"sha256 [0-9a-f]+")}
STORED = {
    lesson.STORED_REFERENCES: visible_references,
    lesson.STORED_INTERVALS: interval_figure,
    lesson.STORED_EXPLORER: interval_explorer,
    lesson.STORED_RESTART: restart_ablation,
    lesson.STORED_ELASTIC: elastic_denominator,
    lesson.STORED_UNEVEN: uneven_flag_run,
    lesson.STORED_TORCHRUN: torchrun_log,
}
