"""Lesson 10, worker failure and restart: data, model, rank-side drivers and checks.

* **what a training rank holds** besides its parameters: :class:`NoisyMLP` draws from all
  three random number generators a rank uses (torch for dropout, numpy for input noise,
  Python's ``random`` for the noise scale), and :class:`GlobalStream` serves the global
  batches of a shuffled dataset with a *cursor* (epoch, position) that a restart must
  restore;
* **rank-side drivers** (``*_on_rank``): run inside :func:`helpers.cluster.run`, call a
  student's function the way the assignment's contract says, and return plain data;
* **checks** (``assert_*``) that compare those results and fail with messages that teach.

Nothing here saves, loads or resumes a checkpoint, trains on uneven inputs or computes a
checkpoint interval: those are the exercises. Their references live on the instructor's
side (``autograder.lessons.l10``); the visible tests read expected values from stored
results. Units: seconds for times, elements for sizes.
"""
from __future__ import annotations

import atexit
import random
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from torch import nn

from helpers import COURSE_SEED, faults, remote
from helpers.cluster import rank_seed
from helpers.data import tensors_from_json
from helpers.reference import SameInit, state_of
from helpers.stored import load

__all__ = [
    "NoisyMLP", "GlobalStream", "as_restart", "scratch_directory", "rng_draws", "load_fresh_on_rank",
    "optimizer_tensors", "uneven_batches", "round_trip_on_rank",
    "resumable_on_rank", "uneven_on_rank", "stored_uneven", "assert_round_trip", "assert_same_run",
    "assert_uneven", "assert_states_equal", "MODEL", "ADAM", "plot_lost_time", "interval_explorer",
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

    Made where the notebook's code runs (:func:`helpers.remote.call`): when a grader runs
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


def _local_step(model: nn.Module, optimizer: torch.optim.Optimizer, stream: GlobalStream,
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
        _local_step(model, optimizer, stream, scaler)
    np.random.standard_normal()  # an odd number of normals: numpy now holds a cached Gaussian
    save_fn(directory, steps, model, optimizer, stream.state_dict(), scaler)
    saved = dict(_snapshot(model, optimizer, stream, scaler), rng=rng_draws(), step=steps)
    for _ in range(2):  # move everything on, as the run does until it fails
        _local_step(model, optimizer, stream, scaler)
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
    from helpers.plots import show_figures

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
