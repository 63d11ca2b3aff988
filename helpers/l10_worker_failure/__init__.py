"""Lesson 10, worker failure and restart: data, model, rank-side drivers and checks.

* **what a training rank holds** besides its parameters: :class:`NoisyMLP` draws from all
  three random number generators a rank uses (torch for dropout, numpy for input noise,
  Python's ``random`` for the noise scale), and :class:`GlobalStream` serves the global
  batches of a shuffled dataset with a *cursor* (epoch, position) that a restart must
  restore;
* **rank-side drivers** (``*_on_rank``): run inside :func:`helpers.runtime.cluster.run`, call a
  student's function the way the assignment's contract says, and return plain data;
* **crash tests** of a checkpoint design (:func:`crash_test`, :func:`stale_test`): a save is
  killed at every write call of every rank (:class:`Crash`), or one rank's directory listings
  lag behind, and each restart is compared with the same job run uninterrupted;
* **checks** (``assert_*``) that compare those results and fail with messages that teach.

Nothing here saves, loads or resumes a checkpoint, trains on uneven inputs or computes a
checkpoint interval: those are the exercises. Their references live on the instructor's
side (``autograder.lessons.l10``); the visible tests read expected values from stored
results. Units: seconds for times, elements for sizes.
"""
from __future__ import annotations

import atexit
import io
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from torch import nn

from helpers import COURSE_SEED
from helpers.runtime import faults, remote
from helpers.runtime.cluster import ClusterError, rank_seed, run
from helpers.runtime.ledger import COLLECTIVES
from helpers.shared.data import tensors_from_json
from helpers.shared.state import SameInit, state_of
from helpers.shared.stored import load

__all__ = [
    "NoisyMLP", "GlobalStream", "as_restart", "scratch_directory", "rng_draws", "load_fresh_on_rank",
    "optimizer_tensors", "uneven_batches", "round_trip_on_rank",
    "resumable_on_rank", "uneven_on_rank", "stored_uneven", "assert_round_trip", "assert_same_run",
    "assert_uneven", "assert_states_equal", "MODEL", "ADAM", "plot_lost_time", "interval_explorer",
    "Crash", "WRITE_CALLS", "job_on_rank", "restart_attempt", "tree", "crash_points", "crash_test", "stale_test",
    "assert_resumed",
]

STORED_REFERENCES = "10_visible_references"
STORED_INTERVALS = "10_intervals"
STORED_EXPLORER = "10_explorer"
STORED_RESTART = "10_restart_ablation"
STORED_ELASTIC = "10_elastic_denominator"
STORED_UNEVEN = "10_uneven_flag"
STORED_TORCHRUN = "10_torchrun_log"
ADAM = dict(lr=0.02, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0)
State = dict[str, torch.Tensor]


class NoisyMLP(nn.Module):
    """A float64 MLP whose training forward draws from the torch, numpy and Python RNGs.

    With ``noisy=True`` and in training mode, the input gets Gaussian noise from numpy scaled
    by ``0.1 * random.random()`` and the hidden layer goes through dropout (torch). A restart
    that does not restore all three generators computes different forward passes.
    """

    def __init__(self, in_features: int = 6, hidden: int = 10, out_features: int = 3, noisy: bool = True) -> None:
        super().__init__()
        self.noisy = noisy
        self.fc1 = nn.Linear(in_features, hidden, dtype=torch.float64)
        self.fc2 = nn.Linear(hidden, out_features, dtype=torch.float64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        noisy = self.noisy and self.training
        if noisy:
            scale = 0.1 * random.random()
            x = x + scale * torch.from_numpy(np.random.standard_normal(tuple(x.shape)))
        h = torch.tanh(self.fc1(x))
        if noisy:
            h = nn.functional.dropout(h, p=0.25)
        return self.fc2(h)


class GlobalStream:
    """Global batches of ``batch_size`` rows from a fixed dataset, reshuffled every epoch.

    Every rank that builds it with the same arguments gets the same batches (the global
    batch; each rank then takes its own rows). ``state_dict()`` is the cursor:
    ``{"epoch": e, "index": i}``, the next sample is position ``i`` of epoch ``e``'s
    order. :meth:`next_batch` calls the course hook ``faults.point("batch")``; ``drawn``
    counts the batches this object has served (not part of the cursor).
    """

    def __init__(self, num_samples: int = 20, batch_size: int = 6, in_features: int = 6,
                 out_features: int = 3, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(num_samples, in_features, generator=g, dtype=torch.float64)
        self.y = torch.randn(num_samples, out_features, generator=g, dtype=torch.float64)
        self.batch_size, self.seed = batch_size, seed
        self.epoch, self.index = 0, 0
        self.drawn = 0

    def _order(self) -> torch.Tensor:
        return torch.randperm(len(self.x), generator=torch.Generator().manual_seed(self.seed * 1000 + self.epoch))

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next global batch ``(x, y)``; advances the cursor by ``batch_size`` samples."""
        faults.point("batch")
        self.drawn += 1
        rows = []
        while len(rows) < self.batch_size:
            if self.index == len(self.x):
                self.epoch, self.index = self.epoch + 1, 0
            rows.append(int(self._order()[self.index]))
            self.index += 1
        return self.x[rows], self.y[rows]

    def state_dict(self) -> dict[str, int]:
        """The cursor: ``{"epoch": int, "index": int}``."""
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Move the cursor to ``state`` (as returned by :meth:`state_dict`)."""
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


MODEL = SameInit(NoisyMLP, seed=10)


def as_restart(model: nn.Module, attempt: int) -> None:
    """Make this rank start restart ``attempt`` (0: the first run) as a new process of a real job would.

    A script launched again by ``torchrun`` seeds itself from ``TORCHELASTIC_RESTART_COUNT``
    and builds a model whose initial weights are not the trained ones. Here: for ``attempt >= 1``
    the torch, numpy and Python generators are reseeded with ``COURSE_SEED + attempt`` (per
    rank) and every parameter is moved by ``attempt``. Without this, a restart that never
    loads its checkpoint would repeat the first run bit for bit (the same seeds, the same
    weights, the same data) and pass for a correct resume.
    """
    if attempt == 0:
        return
    seed = rank_seed(COURSE_SEED + attempt, dist.get_rank())
    torch.manual_seed(seed), np.random.seed(seed), random.seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(float(attempt))


_scratch: list[str] = []


def scratch_directory() -> str:
    """A new empty directory for checkpoints, removed when the Python process exits.

    Made where the notebook's code runs (:func:`helpers.runtime.remote.call`): when a grader runs
    the tests, in the kernel's own temporary directory, which it removes with the kernel.
    """
    path = remote.call(tempfile.mkdtemp, prefix="course-checkpoints-")
    if remote.session is None:
        _scratch.append(path)
    return path


@atexit.register
def _remove_scratch() -> None:
    for path in _scratch:
        shutil.rmtree(path, ignore_errors=True)


def rng_draws() -> dict[str, list[float]]:
    """Three draws from each generator a rank uses (advances them): torch, numpy, python."""
    return {"torch": torch.rand(3, dtype=torch.float64).tolist(),
            "numpy": np.random.standard_normal(3).tolist(),
            "python": [random.random() for _ in range(3)]}


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> State:
    """Every tensor (and number, as a tensor) of ``optimizer``'s state, keyed ``"<index>.<key>"``."""
    state = optimizer.state_dict()["state"]
    return {f"{i}.{key}": torch.as_tensor(value).clone() for i, s in sorted(state.items()) for key, value in s.items()}


def local_step(model: nn.Module, optimizer: torch.optim.Optimizer, stream: GlobalStream,
               scaler: torch.amp.GradScaler | None) -> None:
    """One step on this rank's own view of the next batch, without communication."""
    inputs, targets = stream.next_batch()
    optimizer.zero_grad()
    ((model(inputs) - targets) ** 2).mean().backward()
    optimizer.step()
    if scaler is not None:  # a scaler whose state moves with the steps, as in mixed precision
        scaler.load_state_dict(dict(scaler.state_dict(), _growth_tracker=scaler.state_dict()["_growth_tracker"] + 1))


def _scaler(scale: float) -> torch.amp.GradScaler:
    scaler = torch.amp.GradScaler("cpu")
    scaler.load_state_dict({"scale": scale, "growth_factor": 2.0, "backoff_factor": 0.5,
                            "growth_interval": 1000, "_growth_tracker": 0})
    return scaler


def _snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, stream: GlobalStream,
              scaler: torch.amp.GradScaler | None) -> dict[str, Any]:
    return {"params": state_of(model), "optimizer": optimizer_tensors(optimizer), "cursor": stream.state_dict(),
            "scaler": None if scaler is None else scaler.state_dict()}


def round_trip_on_rank(save_fn: Callable[..., Any], load_fn: Callable[..., Any], directory: str,
                       steps: int = 2, with_scaler: bool = True, model_fn: Callable[[], nn.Module] = MODEL,
                       hyper: Mapping[str, Any] = ADAM) -> dict[str, Any]:
    """Train ``steps`` local steps, save at step ``steps``, train on, then restore into fresh objects.

    Returns ``{"saved": ..., "restored": ..., "meta": what load returned}``: the parameters,
    optimizer tensors, cursor, scaler state and the next RNG draws at the save, and the same
    read from fresh objects (other initial weights, empty optimizer) after ``load_fn``.
    """
    def build(fresh: bool) -> tuple[nn.Module, torch.optim.Optimizer, GlobalStream, Any]:
        model = model_fn()
        if fresh:  # other weights than the saved ones, as a new process would start with
            with torch.no_grad():
                torch._foreach_add_(list(model.parameters()), 1.0)
        scaler = _scaler(2.0 ** (16 if fresh else 9)) if with_scaler else None
        return model, torch.optim.Adam(model.parameters(), **hyper), GlobalStream(), scaler

    model, optimizer, stream, scaler = build(False)
    for _ in range(steps):
        local_step(model, optimizer, stream, scaler)
    np.random.standard_normal()  # an odd number of normals: numpy now holds a cached Gaussian
    save_fn(directory, steps, model, optimizer, stream.state_dict(), scaler)
    saved = dict(_snapshot(model, optimizer, stream, scaler), rng=rng_draws(), step=steps)
    for _ in range(2):  # move everything on, as the run does until it fails
        local_step(model, optimizer, stream, scaler)
    model, optimizer, stream, scaler = build(True)
    meta = load_fn(directory, model, optimizer, scaler)
    cursor = meta.get("cursor") if isinstance(meta, Mapping) else None
    if isinstance(cursor, Mapping):
        stream.load_state_dict(cursor)
    restored = dict(_snapshot(model, optimizer, stream, scaler), rng=rng_draws())
    return {"saved": saved, "restored": restored, "meta": meta}


def resumable_on_rank(train_fn: Callable[..., Any], directory: str, num_steps: int, every: int,
                      model_fn: Callable[[], nn.Module] = MODEL, hyper: Mapping[str, Any] = ADAM,
                      stream_kwargs: Mapping[str, Any] | None = None, attempt: int = 0) -> dict[str, Any]:
    """Build a model, Adam and a stream as attempt ``attempt`` of the job (:func:`as_restart`), call
    ``train_fn``; return everything a restart must reproduce and the number of batches drawn."""
    model = model_fn()
    as_restart(model, attempt)
    optimizer = torch.optim.Adam(model.parameters(), **hyper)
    stream = GlobalStream(**dict(stream_kwargs or {}))
    returned = train_fn(model, optimizer, stream, directory, num_steps, every)
    return {"returned": returned, "params": state_of(model), "optimizer": optimizer_tensors(optimizer),
            "cursor": stream.state_dict(), "rng": rng_draws(), "batches": stream.drawn}


def load_fresh_on_rank(load_fn: Callable[..., Any], directory: str) -> Any:
    """What ``load_fn`` returns for a freshly built model and Adam (as a restarted process calls it)."""
    model = MODEL()
    return load_fn(directory, model, torch.optim.Adam(model.parameters(), **ADAM), None)


def uneven_batches(counts: Sequence[int], sizes: Sequence[int], seed: int, in_features: int = 6,
                   out_features: int = 3) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per rank, ``counts[r]`` float64 batches; batch ``t`` of rank ``r`` has ``sizes[(r + t) % len(sizes)]`` rows."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for r, count in enumerate(counts):
        rows = [sizes[(r + t) % len(sizes)] for t in range(count)]
        out.append([(torch.randn(n, in_features, generator=g, dtype=torch.float64),
                     torch.randn(n, out_features, generator=g, dtype=torch.float64)) for n in rows])
    return out


def uneven_on_rank(train_fn: Callable[..., Any], per_rank: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]],
                   lr: float, model_fn: Callable[[], nn.Module] = MODEL) -> dict[str, Any]:
    """``train_fn(model, SGD(lr), this rank's batches)`` with a noise-free model; steps and parameters."""
    model = model_fn()
    model.noisy = False
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    steps = train_fn(model, optimizer, list(per_rank[dist.get_rank()]))
    return {"steps": steps, "params": state_of(model)}


def stored_uneven(case: str) -> State:
    """The float64 single-process parameters a visible uneven-input test expects."""
    return tensors_from_json(load(STORED_REFERENCES)[case])


# --------------------------------------------------------------------------- checks


def assert_states_equal(got: Mapping[str, torch.Tensor], want: Mapping[str, torch.Tensor], what: str) -> None:
    """Same keys and bit-identical tensors, or an AssertionError naming the first difference."""
    assert sorted(got) == sorted(want), f"{what}: keys {sorted(got)}, expected {sorted(want)}"
    for name in want:
        a, b = torch.as_tensor(got[name]), torch.as_tensor(want[name])
        if a.shape != b.shape or not torch.equal(a.to(b.dtype), b):
            diff = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else "shape"
            raise AssertionError(f"{what}: {name} differs (max abs difference {diff})")


def assert_round_trip(out: Sequence[Mapping[str, Any]], case: str) -> None:
    """Every rank restored exactly what it saved: parameters, optimizer, cursor, RNGs, scaler, step,
    and ``load_checkpoint`` returned the step, the cursor and the world size that wrote it."""
    for rank, r in enumerate(out):
        saved, restored, meta = r["saved"], r["restored"], r["meta"]
        where = f"{case}, rank {rank}"
        assert isinstance(meta, dict), f"{where}: load_checkpoint returned {meta!r}, expected a dict"
        assert meta.get("step") == saved["step"], f"{where}: load_checkpoint says step {meta.get('step')!r}, " \
                                                  f"the checkpoint was saved at step {saved['step']}"
        assert meta.get("world_size") == len(out), f"{where}: load_checkpoint says world size " \
                                                   f"{meta.get('world_size')!r}; {len(out)} ranks wrote the checkpoint"
        assert_states_equal(restored["params"], saved["params"], f"{where}: model")
        assert restored["optimizer"], f"{where}: the optimizer has no state after loading: save optimizer.state_dict()"
        assert_states_equal(restored["optimizer"], saved["optimizer"], f"{where}: optimizer state")
        assert meta.get("cursor") == saved["cursor"], \
            f"{where}: data cursor {meta.get('cursor')!r}, saved {saved['cursor']!r}:" \
            " samples would be replayed or skipped"
        for gen in ("torch", "numpy", "python"):
            assert restored["rng"][gen] == saved["rng"][gen], \
                f"{where}: the {gen} random generator was not restored: its next draws differ"
        assert restored["scaler"] == saved["scaler"], \
            f"{where}: GradScaler state {restored['scaler']}, saved {saved['scaler']}"


def assert_same_run(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]], case: str,
                    resumed_from: int | None = None) -> None:
    """A restarted run ends bit-identical to the uninterrupted one, rank by rank; with ``resumed_from``
    (the latest committed step), the restart drew only the batches after that step."""
    assert len(got) == len(want), f"{case}: {len(got)} ranks, expected {len(want)}"
    for rank, (g, w) in enumerate(zip(got, want)):
        where = f"{case}, rank {rank}"
        if resumed_from is not None:
            need = w["batches"] - resumed_from
            assert g["batches"] == need, \
                f"{where}: the restarted run drew {g['batches']} batches; resuming from the committed step " \
                f"{resumed_from} it needs {need}: it did not continue from the checkpoint"
        assert g["returned"] == w["returned"], f"{where}: returned {g['returned']!r}, expected {w['returned']!r}"
        assert g["cursor"] == w["cursor"], f"{where}: the data stream ends at {g['cursor']}, " \
                                           f"uninterrupted at {w['cursor']}: samples were replayed or skipped"
        assert_states_equal(g["params"], w["params"], f"{where}: parameters vs the uninterrupted run")
        assert_states_equal(g["optimizer"], w["optimizer"], f"{where}: optimizer state vs the uninterrupted run")
        assert g["rng"] == w["rng"], f"{where}: the random generators end in another state than the uninterrupted run's"


def assert_uneven(out: Sequence[Mapping[str, Any]], steps: int, expected: Mapping[str, torch.Tensor],
                  case: str, rtol: float = 1e-7) -> None:
    """Every rank took ``steps`` steps and holds the float64 reference parameters (stored to 9 digits)."""
    for rank, r in enumerate(out):
        assert r["steps"] == steps, f"{case}, rank {rank}: returned {r['steps']!r} steps, expected {steps} " \
                                    "(one per batch of the rank with the most batches)"
        for name, want in expected.items():
            got = r["params"][name]
            assert torch.allclose(got, want, rtol=rtol, atol=1e-12), \
                f"{case}, rank {rank}: {name} differs from the single-process reference by " \
                f"{(got - want).abs().max().item():.3g}: every step's gradient must be the mean over the rows " \
                "of all ranks that still had data"


# --------------------------------------------------------------------------- figure and explorer

DAY = 86400.0


def _lost_axes(ax: Any, intervals: Sequence[float], curves: Mapping[str, Mapping[str, Any]], run_s: float) -> None:
    hours = [t / 3600 for t in intervals]
    for label, c in curves.items():
        line, = ax.plot(hours, [v / 3600 for v in c["lost_s"]], label=label)
        ax.plot([c["young_s"] / 3600], [c["lost_at_young_s"] / 3600], "o", color=line.get_color())
        ax.axvline(c["daly_s"] / 3600, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("checkpoint interval τ (hours of compute)")
    ax.set_ylabel(f"expected time lost over {run_s / DAY:g} days of work (hours)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(title="● Young's optimum, ⋮ Daly's", fontsize=8)


def plot_lost_time(stored: Mapping[str, Any] | None = None) -> Figure:
    """Expected lost time vs checkpoint interval for a few cluster sizes (stored ``10_intervals``)."""
    data = load(STORED_INTERVALS) if stored is None else stored
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    curves = {f"N = {n} nodes (job MTBF {c['job_mtbf_s'] / 3600:.3g} h)": c for n, c in data["curves"].items()}
    _lost_axes(ax, data["intervals_s"], curves, data["run_s"])
    ax.set_title(f"δ = {data['checkpoint_s']:g} s per checkpoint, restart {data['restart_s']:g} s, "
                 f"node MTBF {data['node_mtbf_s'] / (365 * DAY):g} years", fontsize=9)
    return fig


def interval_explorer(checkpoint_s: float = 60.0, mtbf_years: float = 5.0, nodes: int = 512) -> Any:
    """Sliders over checkpoint cost δ, per-node MTBF and node count N (ipywidgets VBox).

    Shows Young's and Daly's intervals, the job's MTBF and the expected lost-time curve, read
    from the stored grid ``10_explorer`` (one entry per slider position). The box has
    ``update()`` (redraw and return the numbers as a dict) and ``controls``.
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    grid = load(STORED_EXPLORER)
    for name, value, options in (("checkpoint_s", checkpoint_s, grid["checkpoint_s"]),
                                 ("mtbf_years", mtbf_years, grid["mtbf_years"]), ("nodes", nodes, grid["nodes"])):
        if value not in options:
            raise ValueError(f"{name} must be one of {options}, got {value!r}")
    style, layout = {"description_width": "170px"}, W.Layout(width="520px")
    d_slider = W.SelectionSlider(options=grid["checkpoint_s"], value=checkpoint_s, description="checkpoint cost δ (s)",
                                 style=style, layout=layout, continuous_update=False)
    m_slider = W.SelectionSlider(options=grid["mtbf_years"], value=mtbf_years, description="node MTBF (years)",
                                 style=style, layout=layout, continuous_update=False)
    n_slider = W.SelectionSlider(options=grid["nodes"], value=nodes, description="nodes N", style=style,
                                 layout=layout, continuous_update=False)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        d, m, n = d_slider.value, m_slider.value, n_slider.value
        entry = grid["grid"][f"{d:g}|{m:g}|{n}"]
        job_mtbf = m * 365 * DAY / n
        lost = entry["lost_s"]
        best = min(range(len(lost)), key=lost.__getitem__)
        result = {"checkpoint_s": d, "mtbf_years": m, "nodes": n, "job_mtbf_s": job_mtbf,
                  "young_s": entry["young_s"], "daly_s": entry["daly_s"], "min_lost_s": lost[best]}
        summary.value = (f"<b>job MTBF</b> M = {job_mtbf / 3600:.3g} h &nbsp;·&nbsp; <b>Young</b> τ = "
                         f"{entry['young_s'] / 60:.3g} min &nbsp;·&nbsp; <b>Daly</b> τ = {entry['daly_s'] / 60:.3g} min"
                         f"<br>expected loss over {grid['run_s'] / DAY:g} days at the best interval: "
                         f"{lost[best] / 3600:.3g} h ({100 * lost[best] / grid['run_s']:.2g} % of the run)")
        fig = Figure(figsize=(6.5, 3.6), layout="constrained")
        _lost_axes(fig.add_subplot(), grid["intervals_s"], {f"N = {n}": entry}, grid["run_s"])
        show_figures(out, [fig], dpi=90)
        box.last_result = result
        return result

    for w in (d_slider, m_slider, n_slider):
        w.observe(update, names="value")
    box = W.VBox([d_slider, m_slider, n_slider, summary, out])
    box.controls = {"checkpoint_s": d_slider, "mtbf_years": m_slider, "nodes": n_slider}
    box.update = update
    update()
    return box


# --------------------------------------------------------------------------- crashes during a save

# The calls through which a save may change the file system: each is a point where a crash test
# can stop a rank (before it, after it, or halfway through a torch.save).
WRITE_CALLS = (("torch", "save"), ("os", "makedirs"), ("os", "mkdir"), ("os", "replace"), ("os", "rename"),
               ("os", "remove"), ("os", "unlink"), ("os", "rmdir"), ("shutil", "rmtree"))
_MODULES = {"torch": torch, "os": os, "shutil": shutil}
_LISTDIR, _SCANDIR = os.listdir, os.scandir  # the real listings, whatever a stale view replaces
HOLD_S = 5.0  # longest wait of a rank held back so that the others run ahead (seconds)
SAVES = (2, 4, 6)  # the steps a crash-test job saves; crashes interrupt the save of CRASH_STEP
CRASH_STEP = 4


@dataclass(frozen=True)
class Crash:
    """Where a save is interrupted: rank ``rank`` is killed (SIGKILL) ``when`` its ``event``-th
    file-system write of the save of :data:`CRASH_STEP` (1-based): ``"before"`` it, ``"after"`` it,
    or ``"torn"`` (halfway through a ``torch.save``: the first half of the bytes are on disk).

    A single rank dies once every other rank has run as far as it can (each is waiting in a
    collective or has returned from the save); the others then fail in their collective. With
    ``when="return"`` every rank dies at once (``everyone``), the moment ``rank`` returns from the
    save, the others having done as little as they could (they wait before each write until
    ``rank`` waits in a collective).
    """

    rank: int
    when: str
    event: int = 0

    @property
    def everyone(self) -> bool:
        return self.when == "return"

    def describe(self, events: Sequence[str] = ()) -> str:
        if self.everyone:
            return f"every rank killed when rank {self.rank} returned from save_checkpoint"
        call = f" ({events[self.event - 1]})" if 0 < self.event <= len(events) else ""
        what = {"before": "before", "after": "after", "torn": "halfway through"}[self.when]
        return f"rank {self.rank} killed {what} its write #{self.event}{call}"


class _Flags:
    """Empty files in a shared directory through which the ranks of a crash test see each other."""

    def __init__(self, path: str) -> None:
        self.path = path

    def set(self, name: str) -> None:
        os.close(os.open(os.path.join(self.path, name), os.O_CREAT | os.O_WRONLY, 0o644))

    def has(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.path, name))

    def count(self, prefix: str) -> int:
        return sum(1 for name in _LISTDIR(self.path) if name.startswith(prefix))

    def waiting(self, rank: int) -> bool:
        """Whether ``rank`` has returned from the save or is inside a collective."""
        return self.has(f"returned.{rank}") or self.count(f"in.{rank}.") > self.count(f"out.{rank}.")

    def hold(self, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + HOLD_S
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.002)

    def pids(self) -> list[int]:
        return [int(name.split(".")[2]) for name in _LISTDIR(self.path) if name.startswith("pid.")]


class _SaveWatch:
    """This rank's file-system writes and collectives during one save: listed, flagged, crashed at."""

    def __init__(self, flags: _Flags, crash: Crash | None, directory: str) -> None:
        self.flags, self.crash, self.directory = flags, crash, os.path.realpath(directory)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.events: list[str] = []  # the write calls, in order
        self.trace: list[str] = []  # the write calls and the collectives, in order
        self.collectives, self.depth = 0, 0
        self.undo: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> "_SaveWatch":
        for module, name in WRITE_CALLS:
            self._patch(_MODULES[module], name, self._write(f"{module}.{name}", getattr(_MODULES[module], name)))
        for op in COLLECTIVES:
            self._patch(dist, op, self._collective(op, getattr(dist, op)))
        if not _watching:
            _add_audit_hook()
        _watching.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _watching.remove(self)
        for module, name, original in reversed(self.undo):
            setattr(module, name, original)

    def _patch(self, module: Any, name: str, replacement: Any) -> None:
        self.undo.append((module, name, getattr(module, name)))
        setattr(module, name, replacement)

    def _hits(self, when: str) -> bool:
        c = self.crash
        return c is not None and not c.everyone and c.rank == self.rank and c.event == len(self.events) \
            and c.when == when

    def _write(self, call: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            if self.depth:  # a write call made by another one (os.makedirs calls os.mkdir)
                return original(*args, **kwargs)
            self.depth += 1
            try:
                self.events.append(call)
                self.trace.append(call)
                if self.crash is not None and self.crash.everyone and self.rank != self.crash.rank:
                    self.flags.hold(lambda: self.flags.waiting(self.crash.rank))
                if self._hits("before"):
                    self.die()
                if self._hits("torn") and call == "torch.save":
                    _write_half(original, *args, **kwargs)
                    self.die()
                result = original(*args, **kwargs)
                if self._hits("after"):
                    self.die()
                return result
            finally:
                self.depth -= 1
        return watched

    def _collective(self, op: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            self.trace.append(f"dist.{op}")
            self.collectives += 1
            n = self.collectives
            self.flags.set(f"in.{self.rank}.{n}")
            try:
                return original(*args, **kwargs)
            finally:
                self.flags.set(f"out.{self.rank}.{n}")
        return watched

    def check_open(self, path: Any, mode: Any, flags: Any) -> None:
        """Refuse a file opened for writing under the checkpoint directory, other than by a write call."""
        if self.depth or not isinstance(path, (str, os.PathLike)):
            return
        writes = any(m in mode for m in "wax+") if isinstance(mode, str) else \
            bool(flags & (os.O_WRONLY | os.O_RDWR)) if isinstance(flags, int) else False
        if writes and os.path.realpath(os.fspath(path)).startswith(self.directory + os.sep):
            raise PermissionError(f"{os.fspath(path)!r} opened for writing: write checkpoint files with "
                                  "torch.save(obj, path) (the calls a crash test can interrupt are listed in the "
                                  "exercise)")

    def die(self) -> None:
        """Let the others run as far as they can (a single crash), then SIGKILL this rank (or every rank)."""
        if not self.crash.everyone:
            self.flags.hold(lambda: all(self.flags.waiting(r) for r in range(self.world_size) if r != self.rank))
        for pid in self.flags.pids() if self.crash.everyone else []:
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


_watching: list[_SaveWatch] = []  # the save this process watches now, if any
_audit_hook: list[bool] = []  # whether this process has the hook (an audit hook cannot be removed)


def _add_audit_hook() -> None:
    """Route every ``open`` this process makes (``open``, ``io.open``, ``os.open``, IPython's ``open``)
    to the watched save's :meth:`_SaveWatch.check_open`."""
    if _audit_hook:
        return
    _audit_hook.append(True)

    def audit(event: str, args: tuple) -> None:
        if event == "open" and _watching:
            _watching[-1].check_open(*args[:3])

    sys.addaudithook(audit)


def _write_half(save: Callable[..., Any], obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
    """What a process killed halfway through ``torch.save(obj, f)`` leaves: the first half of the bytes."""
    buffer = io.BytesIO()
    save(obj, buffer, *args, **kwargs)
    data = buffer.getvalue()[: len(buffer.getvalue()) // 2]
    if isinstance(f, (str, os.PathLike)):
        fd = os.open(f, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, data)
        os.close(fd)
    else:
        f.write(data)
        f.flush()


class _StaleView:
    """On this rank, directory listings (``os.listdir``, ``os.scandir`` and what uses them: ``glob``,
    ``os.walk``, ``pathlib``) under ``directory`` show only the entries in ``seen``, as a file system
    whose listings lag behind would; opening or testing a path by its name still sees it."""

    def __init__(self, directory: str, seen: Sequence[str]) -> None:
        self.root, self.seen = os.path.realpath(directory), set(seen)

    def shown(self, path: Any) -> bool:
        full = os.path.realpath(os.fspath(path))
        return not full.startswith(self.root + os.sep) or os.path.relpath(full, self.root) in self.seen

    def __enter__(self) -> "_StaleView":
        def listdir(path: Any = ".") -> list[Any]:
            return [n for n in _LISTDIR(path) if self.shown(os.path.join(os.fspath(path), os.fsdecode(n)))]

        def scandir(path: Any = ".") -> _FilteredScandir:
            return _FilteredScandir(_SCANDIR(path), self.shown)

        os.listdir, os.scandir = listdir, scandir
        return self

    def __exit__(self, *exc: Any) -> None:
        os.listdir, os.scandir = _LISTDIR, _SCANDIR


class _FilteredScandir:
    """An ``os.scandir`` iterator that skips the entries a stale view does not show."""

    def __init__(self, entries: Any, shown: Callable[[str], bool]) -> None:
        self.entries, self.shown = entries, shown

    def __iter__(self) -> "_FilteredScandir":
        return self

    def __next__(self) -> os.DirEntry:
        while True:
            entry = next(self.entries)
            if self.shown(entry.path):
                return entry

    def __enter__(self) -> "_FilteredScandir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.entries.close()

    def close(self) -> None:
        self.entries.close()


def tree(directory: str) -> list[str]:
    """Every path under ``directory`` (relative to it), as a listing taken now would show them."""
    return sorted(os.path.relpath(os.path.join(top, name), directory)
                  for top, dirs, files in os.walk(directory) for name in dirs + files)


def _fresh(model_fn: Callable[[], nn.Module], with_scaler: bool, attempt: int,
           hyper: Mapping[str, Any]) -> tuple[nn.Module, torch.optim.Optimizer, GlobalStream, Any]:
    """Model, Adam, stream and scaler as attempt ``attempt`` of the job builds them (:func:`as_restart`)."""
    model = model_fn()
    as_restart(model, attempt)
    scaler = _scaler(2.0 ** (9 + attempt)) if with_scaler else None
    return model, torch.optim.Adam(model.parameters(), **hyper), GlobalStream(), scaler


def _resume(load_fn: Callable[..., Any], directory: str, parts: tuple,
            stale: tuple[int, Sequence[str]] | None) -> Any:
    """``load_fn`` into ``parts``; with ``stale = (rank, shown)``, that rank lists ``directory`` through a
    stale view that shows only the paths ``shown``."""
    model, optimizer, stream, scaler = parts
    if stale is None or stale[0] != dist.get_rank():
        meta = load_fn(directory, model, optimizer, scaler)
    else:
        with _StaleView(directory, stale[1]):
            meta = load_fn(directory, model, optimizer, scaler)
    cursor = meta.get("cursor") if isinstance(meta, Mapping) else None
    if isinstance(cursor, Mapping):
        stream.load_state_dict(cursor)
    return meta


def job_on_rank(save_fn: Callable[..., Any], load_fn: Callable[..., Any], directory: str, flags_dir: str,
                num_steps: int = SAVES[-1], attempt: int = 0, crash: Crash | None = None, watch_step: int = CRASH_STEP,
                stale: tuple[int, Sequence[str]] | None = None,
                reload: bool = False, with_scaler: bool = False, model_fn: Callable[[], nn.Module] = MODEL,
                hyper: Mapping[str, Any] = ADAM) -> dict[str, Any]:
    """One attempt of a crash-test job on this rank: each rank trains on its own (no communication).

    Attempt 0 starts at step 0; a later one (other seeds and weights) first calls ``load_fn``
    (with ``stale``: one rank through a stale view, :class:`_StaleView`) and goes on from the step
    it returns. Up to ``num_steps``, it saves at the steps of :data:`SAVES`, watching the save of
    ``watch_step`` (its write calls and collectives; ``crash`` kills a rank there). With
    ``reload``, it then loads again into fresh objects (attempt + 1). After every save and load
    it records the state and the next random draws. Returns plain data: ``before`` (the
    parameters before the load), ``meta``/``restored`` (the load), ``saved`` (per step),
    ``trace`` (the watched save's write calls and collectives), ``final_meta``/``final``.
    """
    flags = _Flags(flags_dir)
    flags.set(f"pid.{dist.get_rank()}.{os.getpid()}")
    rank = dist.get_rank()
    parts = _fresh(model_fn, with_scaler, attempt, hyper)
    out: dict[str, Any] = {"meta": None, "restored": None, "saved": {}, "trace": None, "final_meta": None,
                           "final": None}
    step = 0
    if attempt > 0:
        out["before"] = state_of(parts[0])
        out["meta"] = _resume(load_fn, directory, parts, stale)
        out["restored"] = dict(_snapshot(*parts), rng=rng_draws())
        meta = out["meta"]
        step = meta["step"] if isinstance(meta, dict) and type(meta.get("step")) is int else 0
    while step < num_steps:
        step += 1
        local_step(*parts)
        if step not in SAVES:
            continue
        args = (directory, step, parts[0], parts[1], parts[2].state_dict(), parts[3])
        if step == watch_step:
            with _SaveWatch(flags, crash, directory) as watch:
                save_fn(*args)
            if crash is not None and crash.everyone and crash.rank == rank:
                watch.die()
            out["trace"] = watch.trace
            flags.set(f"returned.{rank}")
        else:
            save_fn(*args)
        out["saved"][step] = dict(_snapshot(*parts), rng=rng_draws())
    if reload:
        parts = _fresh(model_fn, with_scaler, attempt + 1, hyper)
        out["final_meta"] = _resume(load_fn, directory, parts, None)
        out["final"] = dict(_snapshot(*parts), rng=rng_draws())
    return out


def crash_points(traces: Sequence[Sequence[str]], victims: Sequence[int]) -> list[Crash]:
    """Every crash of :class:`Crash` for the ranks ``victims``, from an uninterrupted save's ``traces``
    (per rank, its write calls and collectives in order): before each write, halfway through each
    ``torch.save``, after each write that a collective or the return follows, and at the return."""
    points = []
    for rank in victims:
        trace, k = traces[rank], 0
        for i, call in enumerate(trace):
            if call.startswith("dist."):
                continue
            k += 1
            points.append(Crash(rank, "before", k))
            if call == "torch.save":
                points.append(Crash(rank, "torn", k))
            if i + 1 == len(trace) or trace[i + 1].startswith("dist."):
                points.append(Crash(rank, "after", k))
        points.append(Crash(rank, "return"))
    return points


class _Scratch:
    """Empty directories made (and removed) where the ranks run."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __enter__(self) -> list[str]:
        self.paths = [remote.call(tempfile.mkdtemp, prefix="course-crash-") for _ in range(self.count)]
        return self.paths

    def __exit__(self, *exc: Any) -> None:
        for path in self.paths:
            remote.call(shutil.rmtree, path, ignore_errors=True)


def _returned(flags_dir: str) -> list[int]:
    """The ranks whose save of :data:`CRASH_STEP` returned (read where the ranks ran)."""
    return sorted(int(name.split(".")[1]) for name in os.listdir(flags_dir) if name.startswith("returned."))


def _job(*args: Any, world_size: int, **kwargs: Any) -> list[dict[str, Any]]:
    return run(job_on_rank, *args, world_size=world_size, timeout=60, **kwargs)


def _uninterrupted(save_fn: Callable[..., Any], load_fn: Callable[..., Any], world_size: int,
                   job: Mapping[str, Any]) -> list[dict[str, Any]]:
    with _Scratch(2) as (directory, flags):
        return _job(save_fn, load_fn, directory, flags, world_size=world_size, **job)


def restart_attempt(save_fn: Callable[..., Any], load_fn: Callable[..., Any], directory: str, flags: str, where: str,
             attempt: int = 1, stale: tuple[int, Sequence[str]] | None = None,
             **job: Any) -> tuple[list[dict[str, Any]], Callable[[], list[dict[str, Any]]]]:
    """The restarted job's load (alone, so that ranks which disagree are told before they deadlock), and
    the function that runs the restarted job on (load, train to the last save, load again); a failure
    of either is told as ``where``'s."""
    def attempt_job(**kwargs: Any) -> list[dict[str, Any]]:
        try:
            return _job(save_fn, load_fn, directory, flags, attempt=attempt, **job, **kwargs)
        except ClusterError as exc:
            raise AssertionError(f"{where}: the restart failed: {str(exc).splitlines()[0]}") from None

    return attempt_job(num_steps=0, stale=stale), lambda: attempt_job(stale=stale, reload=True)


def crash_test(save_fn: Callable[..., Any], load_fn: Callable[..., Any], world_size: int,
               victims: Sequence[int] | None = None, **job: Any) -> list[str]:
    """Interrupt the save of step 4 at every crash point of ``victims`` (default: every rank), restart.

    Each case runs a job (:func:`job_on_rank`, saves at steps 2, 4, 6) until the crash, then a
    restart: a new attempt (other seeds and weights) that loads, trains on to step 6 and loads
    again. :func:`assert_resumed` checks it against an uninterrupted job. Returns one line per
    crash point; raises ``AssertionError`` at the first that fails.
    """
    baseline = _uninterrupted(save_fn, load_fn, world_size, job)
    traces = [r["trace"] for r in baseline]
    lines = []
    for crash in crash_points(traces, range(world_size) if victims is None else victims):
        where = f"{world_size} ranks, {crash.describe([c for c in traces[crash.rank] if not c.startswith('dist.')])}"
        with _Scratch(3) as (directory, flags, restart_flags):
            try:
                _job(save_fn, load_fn, directory, flags, crash=crash, world_size=world_size, **job)
            except ClusterError:
                pass
            returned = remote.call(_returned, flags)
            if returned or crash.everyone:
                allowed = [CRASH_STEP]
                why = f"save_checkpoint of step {CRASH_STEP} had returned on rank {(returned or [crash.rank])[0]}, " \
                      "and a save that returned on any rank has committed its step"
            else:
                allowed = [SAVES[0], CRASH_STEP]
                why = f"step {SAVES[0]} was committed; no save of step {CRASH_STEP} had returned, so step " \
                      f"{CRASH_STEP} only if every rank's state of it is complete"
            step = assert_resumed(*restart_attempt(save_fn, load_fn, directory, restart_flags, where,
                                            world_size=world_size, **job), baseline, where, allowed, why)
        lines.append(f"{where}: every rank resumed from step {step}")
    return lines


def stale_test(save_fn: Callable[..., Any], load_fn: Callable[..., Any], world_size: int, stale_rank: int,
               **job: Any) -> str:
    """Steps 2 and 4 committed (by two attempts), then a restart on which rank ``stale_rank``'s listings
    still show the directory as it was after step 2: every rank must resume from one step, 2 or 4."""
    baseline = _uninterrupted(save_fn, load_fn, world_size, job)
    where = f"{world_size} ranks, steps 2 and 4 committed, rank {stale_rank}'s listings show only step 2's files"
    with _Scratch(2) as (directory, flags):
        _job(save_fn, load_fn, directory, flags, num_steps=SAVES[0], world_size=world_size, **job)
        shown = remote.call(tree, directory)
        _job(save_fn, load_fn, directory, flags, num_steps=CRASH_STEP, attempt=1, world_size=world_size, **job)
        step = assert_resumed(*restart_attempt(save_fn, load_fn, directory, flags, where, attempt=2,
                                        stale=(stale_rank, shown), world_size=world_size, **job),
                              baseline, where, [SAVES[0], CRASH_STEP],
                              "both are committed; any step every rank's listing shows, or a later one")
    return f"{where}: every rank resumed from step {step}"


def _step_of(meta: Any) -> Any:
    return meta.get("step") if isinstance(meta, dict) else meta


def assert_resumed(loaded: Sequence[Mapping[str, Any]], finish: Callable[[], Sequence[Mapping[str, Any]]],
                   baseline: Sequence[Mapping[str, Any]], where: str, allowed: Sequence[int | None], why: str) -> Any:
    """Every rank of the restart's load (``loaded``) resumed from one step of ``allowed`` (``None``:
    nothing loaded) and restored exactly the state ``baseline`` (the uninterrupted job) had there;
    ``finish()`` (the restarted job trained on to the last step of :data:`SAVES` and loaded again)
    ends with the uninterrupted job's state of that step. Returns the step."""
    steps = [_step_of(r["meta"]) for r in loaded]
    assert all(s == steps[0] for s in steps), \
        f"{where}: the ranks resumed from steps {steps}: every rank must resume from the same step " \
        "(ranks that resume from different steps deadlock or mix two steps)"
    assert steps[0] in allowed, f"{where}: the restart resumed from step {steps[0]!r}; expected " \
                                f"{' or '.join(map(str, allowed))} ({why})"
    for rank, r in enumerate(loaded):
        if steps[0] is None:
            assert_states_equal(r["restored"]["params"], r["before"],
                                f"{where}, rank {rank}: load_checkpoint returned None but changed the model")
        else:
            assert r["meta"].get("world_size") == len(loaded), \
                f"{where}, rank {rank}: load_checkpoint says world size {r['meta'].get('world_size')!r}"
            _assert_snapshot(r["restored"], baseline[rank]["saved"][steps[0]],
                             f"{where}, rank {rank}: the state restored from step {steps[0]}")
    last = SAVES[-1]
    for rank, r in enumerate(finish()):
        assert _step_of(r["final_meta"]) == last, \
            f"{where}, rank {rank}: after training on and saving step {last}, load_checkpoint returned step " \
            f"{_step_of(r['final_meta'])!r}: a save must also work over what a killed attempt left"
        if steps[0] is not None:  # a restart from nothing is a new run (other seeds and weights)
            _assert_snapshot(r["final"], baseline[rank]["saved"][last],
                             f"{where}, rank {rank}: step {last} of the restarted run vs the uninterrupted run")
    return steps[0]


def _assert_snapshot(got: Mapping[str, Any], want: Mapping[str, Any], what: str) -> None:
    assert_states_equal(got["params"], want["params"], f"{what}, model")
    assert_states_equal(got["optimizer"], want["optimizer"], f"{what}, optimizer state")
    assert got["cursor"] == want["cursor"], f"{what}: data cursor {got['cursor']}, expected {want['cursor']}"
    assert got["scaler"] == want["scaler"], f"{what}: GradScaler state {got['scaler']}, expected {want['scaler']}"
    for gen in ("torch", "numpy", "python"):
        assert got["rng"][gen] == want["rng"][gen], f"{what}: the {gen} random generator differs"
