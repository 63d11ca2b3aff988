"""Tests of lesson 08's chapter numbers (autograder.lessons.l08) and of helpers.l08_prefetching.plots, which draws
them from the stored results (Agg backend, no gloo)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io

import pytest

from autograder.lessons import l08
from figure_checks import renders
from helpers.l08_prefetching import plots as pp

UNIT, ACT, SHARDS = [100e6] * 6, [20e6] * 6, 75e6


def _boxes(ax) -> list[tuple[float, float]]:
    out = []
    for c in ax.collections:
        if c.__class__.__name__ == "PolyCollection":
            v = c.get_paths()[0].vertices
            out.append((round(v[:, 0].min(), 9), round(v[:, 0].max(), 9), round(v[:, 1].min(), 9)))
    return out


def test_synthetic_units() -> None:
    g, c = l08.synthetic_units(4, compute_ms=2.0, comm_compute_ratio=0.5, slow_unit=1, slow_factor=3)
    assert c == [2e-3] * 4
    assert g == pytest.approx([1e-3, 3e-3, 1e-3, 1e-3])


@pytest.mark.parametrize("depth", [0, 1, 2, 5])
def test_gaps_add_up_to_exposed_communication(depth: int) -> None:
    g, c = l08.synthetic_units(6, 1.0, 0.6, slow_unit=2, slow_factor=5)
    sched = l08.prefetch_schedule(g, c, depth)
    gaps = l08.exposed_gaps(sched)
    assert sum(b - a for a, b in gaps) == pytest.approx(l08.exposed_communication(sched, c))
    assert gaps[0] == [0.0, pytest.approx(g[0])]  # the first all-gather is always exposed


@pytest.mark.parametrize("ratio,depth", [(0.6, 0), (0.6, 2), (1.5, 1), (3.0, 3)])
def test_live_memory_curve_matches_peak_and_counts_from_issue(ratio: float, depth: int) -> None:
    g, c = l08.synthetic_units(6, 1.0, ratio)
    sched = l08.prefetch_schedule(g, c, depth)
    curve = l08.live_memory_curve(sched, UNIT, ACT, SHARDS)
    assert max(curve["total"]) == pytest.approx(l08.peak_live_bytes(sched, UNIT, ACT, SHARDS))
    assert curve["times"][0] == 0.0 and curve["times"][-1] == sched[-1][3]
    assert curve["activations"] == sorted(curve["activations"])  # activations only accumulate
    assert curve["activations"][-1] == sum(ACT)
    k = curve["times"].index(sched[1][0])  # right after unit 1 is issued its landing buffer is live
    if sched[1][1] > sched[1][0]:
        assert curve["landing"][k] >= UNIT[1]
    # at most depth + 1 units of full parameters at any time
    assert max(a + b for a, b in zip(curve["landing"], curve["gathered"])) <= (depth + 1) * UNIT[0]


def test_chapter_scenarios() -> None:
    chapter = l08.chapter_results()
    even, slow, long = chapter["even"], chapter["slow"], chapter["long"]
    assert [r["peak_bytes"] for r in even["depths"][:3]] == [295e6, 375e6, 455e6]
    assert slow["depths"][0]["forward_s"] == pytest.approx(sum(slow["gather_s"]) + sum(slow["compute_s"]))
    exposed = [r["exposed_s"] for r in slow["depths"]]
    assert exposed == sorted(exposed, reverse=True)
    # issue 12 item 1: counted from the issue, depths 3..5 need 535/615/695 MB; from a free channel 455 MB
    assert [r["peak_bytes"] for r in slow["depths"]] == [295e6, 375e6, 455e6, 535e6, 615e6, 695e6]
    assert slow["channel_free_peak_bytes"] == [295e6, 375e6, 455e6, 455e6, 455e6, 455e6]
    assert slow["max_depth"] == {"250000000": None, "300000000": 0, "400000000": 1, "500000000": 2}
    assert slow["best_depth"] == slow["max_depth"]   # the slow unit needs depth 2 to reach its floor
    assert even["max_depth"]["500000000"] == 2 and even["best_depth"]["500000000"] == 1   # depth 2 hides nothing more
    assert long["depths"][1]["peak_bytes"] - long["depth_1_peak_from_landing"] == pytest.approx(80e6)
    for row in slow["depths"]:   # an all-gather moves bytes once issued and the channel is free
        sched = row["schedule"]
        starts = [max(sched[v][0], sched[v - 1][1] if v else 0.0) for v in range(len(sched))]
        assert row["transfers"] == pytest.approx(starts)
    assert pp.chapter_scenario("even") == even   # the stored file is this producer's output


def test_measured_forward_allocates_what_the_planner_counts() -> None:
    measured, slow = pp.chapter_scenario("measured"), pp.chapter_scenario("slow")
    assert len(measured["depths"]) == 6 and len(set(measured["unit_bytes"])) == 1
    for row, model in zip(measured["depths"], slow["depths"]):
        d = row["depth"]
        assert (row["measured_bytes"] == row["planned_bytes"]
                == measured["shard_bytes"] + (d + 1) * measured["unit_bytes"][0])
        assert row["materialised"][0] == list(range(d + 1))           # all d + 1 buffers live while unit 0 computes
        assert row["issue_s"] == pytest.approx([r[0] for r in model["schedule"]])   # the clock agrees with I_v
        assert row["blocked_s"] == pytest.approx(model["exposed_s"])
        assert row["forward_s"] == pytest.approx(model["forward_s"])
        assert (row["channel_free_bytes"] < row["measured_bytes"]) == (d >= 3)


def test_explorer_grid_matches_the_references() -> None:
    grid = l08.explorer_results()
    config = grid["configs"]["6/0.6/3"]
    g, c = l08.synthetic_units(6, 1.0, 0.6, slow_unit=3, slow_factor=grid["slow_factor"])
    assert config["gather_s"] == pytest.approx(g)
    for d, row in enumerate(config["depths"]):
        assert [t for r in row["schedule"] for t in r] == pytest.approx(
            [t for r in l08.prefetch_schedule(g, c, d) for t in r])
    acts = [20e6] * 6
    assert config["peak_bytes"]["20"] == pytest.approx(
        [l08.peak_live_bytes(l08.prefetch_schedule(g, c, d), UNIT, acts, SHARDS) for d in range(6)])
    assert config["max_depth"]["20"]["500"] == l08.max_prefetch_depth(g, c, UNIT, acts, SHARDS, 500e6)
    assert config["best_depth"]["20"]["1000"] == l08.best_prefetch_depth(g, c, UNIT, acts, SHARDS, 1000e6) == 2
    scenario = pp.explorer_scenario(6, 0.6, 3, 20)
    assert scenario["max_depth"]["500000000"] == config["max_depth"]["20"]["500"]
    assert scenario["best_depth"]["1000000000"] == 2 and scenario["max_depth"]["1000000000"] == 5
    with pytest.raises(KeyError):
        pp.explorer_scenario(5, 0.6, -1, 20)


def test_timeline_boxes_follow_the_schedule() -> None:
    slow = pp.chapter_scenario("slow")
    fig = pp.plot_prefetch_timeline(slow, [0, 2])
    assert len(fig.axes) == 2
    for ax, depth in zip(fig.axes, (0, 2)):
        row = slow["depths"][depth]
        assert f"exposed communication {row['exposed_s'] * 1e3:.3g} ms" in ax.get_title(loc="left")
        assert [t.get_text() for t in ax.get_yticklabels()] == ["all-gather", "compute"]
        boxes = _boxes(ax)
        for (i, f, s, e), t in zip(row["schedule"], row["transfers"]):   # the channel carries [transfer, landed)
            assert (pytest.approx(t * 1e3), pytest.approx(f * 1e3), pytest.approx(-0.3)) in boxes
            assert (pytest.approx(s * 1e3), pytest.approx(e * 1e3), pytest.approx(0.7)) in boxes
        assert len(boxes) == 2 * len(row["schedule"]) + len(row["gaps"])
    assert fig.axes[-1].get_xlabel() and fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    renders(fig)
    with pytest.raises(ValueError):
        pp.plot_prefetch_timeline(slow, [6])


def test_live_memory_figure_marks_peak_and_budget() -> None:
    fig = pp.plot_live_memory(pp.chapter_scenario("even"), [0, 1, 2], budget_bytes=400e6)
    assert len(fig.axes) == 3
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == ["depth 0: peak 295 MB, within the budget", "depth 1: peak 375 MB, within the budget",
                      "depth 2: peak 455 MB, OVER the budget"]
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "landing buffers (issued, not landed; queued or in transfer)" in legend and "budget 400 MB" in legend
    assert fig.axes[0].get_ylabel() == "live bytes" and fig.axes[-1].get_xlabel()
    renders(fig)
    renders(pp.plot_live_memory(pp.chapter_scenario("long"), 1))


def test_depth_tradeoff_marks_the_depth_to_run_and_the_deepest() -> None:
    slow = pp.chapter_scenario("slow")
    fig = pp.plot_depth_tradeoff(slow, budget_bytes=400e6)
    ax_e, ax_m = fig.axes
    assert ax_e.get_ylabel() and ax_m.get_ylabel() and ax_m.get_xlabel()
    assert len(ax_e.patches) == len(ax_m.patches) == 6
    legend = [t.get_text() for t in ax_m.get_legend().get_texts()]
    assert "depth to run: d = 1" in legend and "deepest that fits: d = 1 (upper bound)" in legend
    assert "run d = 1" in fig._suptitle.get_text()
    wide = pp.plot_depth_tradeoff(pp.chapter_scenario("even"), budget_bytes=500e6)   # 0.6 ms gathers: d = 1 hides all
    assert "depth to run: d = 1" in [t.get_text() for t in wide.axes[1].get_legend().get_texts()]
    assert "deepest that fits is d = 2" in wide._suptitle.get_text()
    renders(fig)
    none = pp.plot_depth_tradeoff(slow, budget_bytes=250e6)
    assert "no depth fits" in none._suptitle.get_text()
    renders(none)
    renders(pp.plot_depth_tradeoff(slow))
    with pytest.raises(ValueError, match="no stored depth"):
        pp.plot_depth_tradeoff(slow, budget_bytes=123e6)


def test_enqueue_vs_blocked_draws_measured_rows() -> None:
    rows = [{"unit": u, "issue_at": 3e-3 * u, "enqueue_s": 1e-5, "wait_at": 3e-3 * u + 1e-5, "blocked_s": b,
             "compute_at": 3e-3 * u + 1e-5 + b, "compute_s": 1e-3} for u, b in enumerate([2e-3, 0.0, 1e-3])]
    fig = pp.plot_enqueue_vs_blocked(rows)
    ax_t, ax_b = fig.axes
    assert ax_b.get_xscale() == "linear" and ax_b.get_xlim()[0] == 0 and ax_t.get_xlabel() and ax_b.get_ylabel()
    assert [round(b.get_width(), 12) for b in ax_b.patches] == [0.01] * 3 + [2.0, 0.0, 1.0]   # ms, zero drawn as 0
    assert [t.get_text() for t in ax_b.texts] == ["0.01"] * 3 + ["2", "0", "1"]
    assert [t.get_text() for t in ax_b.get_yticklabels()] == ["unit 0", "unit 1", "unit 2"]
    assert "blocked in wait() 3 ms in all" in fig._suptitle.get_text()
    assert "enqueue times 0.03 ms in all" in fig._suptitle.get_text()
    renders(fig)
    with pytest.raises(ValueError):
        pp.plot_enqueue_vs_blocked([])


def test_enqueue_of_zero_is_drawn_as_zero() -> None:
    """Issue 24: on the modelled clock every enqueue time is 0; no bar may show a floor value for it."""
    rows = [{"unit": u, "issue_at": 3e-3 * u, "enqueue_s": 0.0, "wait_at": 3e-3 * u, "blocked_s": b,
             "compute_at": 3e-3 * u + b, "compute_s": 1e-3} for u, b in enumerate([2e-3, 0.0, 1e-3])]
    fig = pp.plot_enqueue_vs_blocked(rows)
    ax_t, ax_b = fig.axes
    assert [b.get_width() for b in ax_b.patches[:3]] == [0.0] * 3
    assert [t.get_text() for t in ax_b.texts[:3]] == ["0"] * 3
    assert [b.get_width() for b in ax_t.patches[::3]] == [0.0] * 3   # the call itself: a tick, no invented width
    assert "enqueue times 0 ms in all" in fig._suptitle.get_text()
    renders(fig)


def test_explorer_update_changes_the_output() -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = pp.prefetch_explorer(num_units=6, depth=1, budget_mb=400, comm_compute_ratio=0.6, activation_mb=20)
        first = dict(box.last_result)
        assert first["exposed_s"] == pytest.approx(0.6e-3) and first["peak_bytes"] == pytest.approx(375e6)
        assert first["fits"] and first["max_depth"] == first["best_depth"] == 1
        assert "exposed communication 0.6 ms" in box.summary.value and "375 MB" in box.summary.value

        box.controls["depth"].value = 0
        assert box.last_result["exposed_s"] == pytest.approx(3.6e-3)
        box.controls["slow_unit"].value = 3
        box.controls["depth"].value = 3
        assert box.last_result["gather_s"][3] == pytest.approx(3e-3) and not box.last_result["fits"]
        box.controls["budget_mb"].value = 600
        assert box.last_result["fits"] and box.last_result["max_depth"] == 3   # peaks (d + 1) x 100 MB + 195 MB
        assert box.last_result["best_depth"] == 2 and "depth to run: 2 (deepest that fits: 3)" in box.summary.value
        box.controls["num_units"].value = 4            # depth and slow unit sliders follow the unit count
        assert box.controls["depth"].max == 3 and box.last_result["num_units"] == 4
        assert list(box.controls["slow_unit"].options) == [-1, 0, 1, 2, 3] and box.last_result["depth"] <= 3
        box.controls["comm_compute_ratio"].value = 1.5
        assert box.last_result["gather_s"][0] == pytest.approx(1.5e-3)
        box.controls["activation_mb"].value = 100
        assert box.last_result["activation_bytes"] == [100e6] * 4
        result = box.update()
    assert result is box.last_result
