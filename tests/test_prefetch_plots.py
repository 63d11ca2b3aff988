"""Fast unit tests for helpers.prefetch_plots (lesson 08 figures and explorer; Agg backend, no gloo)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io

import pytest

from figure_checks import renders
from helpers import prefetch
from helpers import prefetch_plots as pp

UNIT, ACT, SHARDS = [100e6] * 6, [20e6] * 6, 75e6




def _boxes(ax) -> list[tuple[float, float]]:
    out = []
    for c in ax.collections:
        if c.__class__.__name__ == "PolyCollection":
            v = c.get_paths()[0].vertices
            out.append((round(v[:, 0].min(), 9), round(v[:, 0].max(), 9), round(v[:, 1].min(), 9)))
    return out


def test_synthetic_units() -> None:
    g, c = pp.synthetic_units(4, compute_ms=2.0, comm_compute_ratio=0.5, slow_unit=1, slow_factor=3)
    assert c == [2e-3] * 4
    assert g == pytest.approx([1e-3, 3e-3, 1e-3, 1e-3])
    with pytest.raises(ValueError):
        pp.synthetic_units(3, slow_unit=3)
    with pytest.raises(ValueError):
        pp.synthetic_units(0)


@pytest.mark.parametrize("depth", [0, 1, 2, 5])
def test_gaps_add_up_to_exposed_communication(depth: int) -> None:
    g, c = pp.synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    sched = prefetch.prefetch_schedule(g, c, depth)
    gaps = pp.exposed_gaps(sched)
    assert sum(b - a for a, b in gaps) == pytest.approx(prefetch.exposed_communication(sched, c))
    assert gaps[0] == (0.0, pytest.approx(g[0]))  # the first all-gather is always exposed


@pytest.mark.parametrize("ratio,depth", [(0.6, 0), (0.6, 2), (1.5, 1), (3.0, 3)])
def test_live_memory_curve_matches_peak_and_counts_from_issue(ratio: float, depth: int) -> None:
    g, c = pp.synthetic_units(6, 1.0, ratio)
    sched = prefetch.prefetch_schedule(g, c, depth)
    curve = pp.live_memory_curve(sched, UNIT, ACT, SHARDS)
    assert max(curve["total"]) == pytest.approx(prefetch.peak_live_bytes(sched, UNIT, ACT, SHARDS))
    assert curve["times"][0] == 0.0 and curve["times"][-1] == sched[-1][3]
    assert curve["activations"] == sorted(curve["activations"])  # activations only accumulate
    assert curve["activations"][-1] == sum(ACT)
    # right after unit 1 is issued its landing buffer is live (half-open [I, F))
    k = curve["times"].index(sched[1][0])
    if sched[1][1] > sched[1][0]:
        assert curve["landing"][k] >= UNIT[1]
    # at most depth + 1 units of full parameters at any time
    assert max(a + b for a, b in zip(curve["landing"], curve["gathered"])) <= (depth + 1) * UNIT[0]
    with pytest.raises(ValueError):
        pp.live_memory_curve(sched, UNIT[:-1], ACT, SHARDS)


def test_depth_sweep() -> None:
    g, c = pp.synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    rows = pp.depth_sweep(g, c, UNIT, ACT, SHARDS)
    assert [r["depth"] for r in rows] == list(range(6))
    assert rows[0]["forward_s"] == pytest.approx(sum(g) + sum(c))
    exposed = [r["exposed_s"] for r in rows]
    peaks = [r["peak_bytes"] for r in rows]
    assert exposed == sorted(exposed, reverse=True) and peaks == sorted(peaks)


def test_timeline_boxes_follow_the_schedule() -> None:
    g, c = pp.synthetic_units(4, 1.0, 0.6, slow_unit=2, slow_factor=5)
    fig = pp.plot_prefetch_timeline(g, c, [0, 2])
    assert len(fig.axes) == 2
    for ax, depth in zip(fig.axes, (0, 2)):
        sched = prefetch.prefetch_schedule(g, c, depth)
        exposed = prefetch.exposed_communication(sched, c)
        assert f"exposed communication {exposed * 1e3:.3g} ms" in ax.get_title(loc="left")
        assert [t.get_text() for t in ax.get_yticklabels()] == ["all-gather", "compute"]
        boxes = _boxes(ax)
        for i, f, s, e in sched:
            assert (pytest.approx(i * 1e3), pytest.approx(f * 1e3), pytest.approx(-0.3)) in boxes
            assert (pytest.approx(s * 1e3), pytest.approx(e * 1e3), pytest.approx(0.7)) in boxes
        assert len(boxes) == 2 * len(sched) + len(pp.exposed_gaps(sched))
    assert fig.axes[-1].get_xlabel() and fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    renders(fig)
    renders(pp.plot_prefetch_timeline([0.0], [1e-3], 0))
    with pytest.raises(ValueError):
        pp.plot_prefetch_timeline(g, c[:-1], 1)
    with pytest.raises(ValueError):
        pp.plot_prefetch_timeline(g, c, [-1])


def test_live_memory_figure_marks_peak_and_budget() -> None:
    g, c = pp.synthetic_units(6, 1.0, 0.6)
    fig = pp.plot_live_memory(g, c, [0, 1, 2], UNIT, ACT, SHARDS, budget_bytes=400e6)
    assert len(fig.axes) == 3
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["depth 0: peak 295 MB, within the budget", "depth 1: peak 375 MB, within the budget",
                      "depth 2: peak 455 MB, OVER the budget"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "landing buffers (issued, not landed)" in legend and "budget 400 MB" in legend
    assert fig.axes[0].get_ylabel() == "live bytes" and fig.axes[-1].get_xlabel()
    renders(fig)
    renders(pp.plot_live_memory(g, c, 1, UNIT, [0] * 6, 0))


def test_depth_tradeoff_marks_max_depth() -> None:
    g, c = pp.synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    fig = pp.plot_depth_tradeoff(g, c, UNIT, ACT, SHARDS, budget_bytes=400e6)
    ax_e, ax_m = fig.axes
    assert ax_e.get_ylabel() and ax_m.get_ylabel() and ax_m.get_xlabel()
    assert len(ax_e.patches) == len(ax_m.patches) == 6
    best = prefetch.max_prefetch_depth(g, c, UNIT, ACT, SHARDS, 400e6)
    assert best == 1
    assert f"max_prefetch_depth = {best}" in [t.get_text() for t in ax_m.get_legend().get_texts()]
    assert "d = 1" in fig._suptitle.get_text()
    renders(fig)
    none = pp.plot_depth_tradeoff(g, c, UNIT, ACT, SHARDS, budget_bytes=100e6)
    assert "no depth fits" in none._suptitle.get_text()
    renders(none)
    renders(pp.plot_depth_tradeoff(g, c, UNIT, ACT, SHARDS))


def test_trace_rows_and_enqueue_vs_blocked() -> None:
    trace = prefetch.synthetic_trace([1e-5, 2e-5, 1e-5], [2e-3, 0.0, 1e-3], [1e-3] * 3)
    rows = pp.trace_rows(trace)
    assert [r["unit"] for r in rows] == [0, 1, 2]
    assert [r["blocked_s"] for r in rows] == pytest.approx([2e-3, 0.0, 1e-3])
    assert [r["enqueue_s"] for r in rows] == pytest.approx([1e-5, 2e-5, 1e-5])
    assert rows == pp.trace_rows(list(reversed(trace)))  # order of events does not matter
    fig = pp.plot_enqueue_vs_blocked(trace)
    ax_t, ax_b = fig.axes
    assert ax_b.get_xscale() == "log" and ax_t.get_xlabel() and ax_b.get_ylabel()
    assert [t.get_text() for t in ax_b.get_yticklabels()] == ["unit 0", "unit 1", "unit 2"]
    assert f"blocked_waiting_s {prefetch.blocked_waiting_s(trace) * 1e3:.3g} ms" in fig._suptitle.get_text()
    assert "sum of enqueue times 0.04 ms" in fig._suptitle.get_text()
    renders(fig)
    with pytest.raises(ValueError):
        pp.trace_rows([("issue_call", 0, 0.0)])
    with pytest.raises(ValueError):
        pp.trace_rows([])
    with pytest.raises(ValueError):
        pp.trace_rows([("launch", 0, 0.0)])


def test_explorer_update_changes_the_output() -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = pp.prefetch_explorer(num_units=6, depth=1, budget_mb=400, comm_compute_ratio=0.6, unit_mb=100,
                                   activation_mb=20, world_size=8)
        first = dict(box.last_result)
        assert first["exposed_s"] == pytest.approx(0.6e-3) and first["peak_bytes"] == pytest.approx(375e6)
        assert first["fits"] and first["max_depth"] == 1
        assert "exposed communication 0.6 ms" in box.summary.value and "375 MB" in box.summary.value

        box.controls["depth"].value = 0
        assert box.last_result["exposed_s"] == pytest.approx(3.6e-3)
        box.controls["slow_unit"].value = 2
        box.controls["slow_factor"].value = 5
        box.controls["depth"].value = 2
        assert box.last_result["exposed_s"] == pytest.approx(2.2e-3) and not box.last_result["fits"]
        box.controls["budget_mb"].value = 500
        assert box.last_result["fits"] and box.last_result["max_depth"] == 5
        box.controls["num_units"].value = 3            # depth and slow unit sliders are clamped
        assert box.controls["depth"].max == 2 and box.last_result["num_units"] == 3
        assert box.last_result["depth"] <= 2
        box.controls["comm_compute_ratio"].value = 2.0
        assert box.last_result["gather_s"][0] == pytest.approx(2e-3)
        box.controls["world_size"].value = 2
        assert box.last_result["shard_bytes"] == pytest.approx(150e6)
        result = box.update()
    assert result is box.last_result
