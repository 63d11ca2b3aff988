"""Fast unit tests for helpers.shared.plots and helpers.l01_replicated_training.plots (Agg backend, no kernel)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")


import pytest

from autograder.lessons.costs import ring_allreduce_bytes
from figure_checks import labelled, renders
from helpers.shared import plots
from helpers.l01_replicated_training import plots as lesson_plots
from helpers.shared.stored import load


def test_format_bytes():
    assert plots.format_bytes(0) == "0 B"
    assert plots.format_bytes(999) == "999 B"
    assert plots.format_bytes(1500) == "1.5 kB"
    assert plots.format_bytes(5.2e9) == "5.2 GB"
    assert plots.format_bytes(3e15) == "3e+03 TB"


def test_sample_weights():
    fig = plots.plot_sample_weights({"a": [0.25] * 4, "b": [0.5, 0.5, 0.125, 0.125]}, [2, 2])
    ax = fig.axes[0]
    labelled(ax)
    assert len(ax.patches) >= 8  # 8 bars (+ shard shading)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]
    renders(fig)
    with pytest.raises(ValueError):
        plots.plot_sample_weights({"a": [1, 2, 3]}, [2, 2])
    with pytest.raises(ValueError):
        plots.plot_sample_weights({"a": [1, 2], "b": [1]}, [1, 1])


def test_replica_drift_handles_exact_zero():
    steps = list(range(1, 6))
    fig = plots.plot_replica_drift(steps, {"aligned": [0.0] * 5, "drifting": [1e-5 * s for s in steps]})
    ax = fig.axes[0]
    labelled(ax)
    assert ax.get_yscale() == "symlog"
    assert len(ax.get_lines()) == 2
    assert ax.get_ylim()[0] == 0
    renders(fig)
    with pytest.raises(ValueError):
        plots.plot_replica_drift(steps, {"short": [0.0]})
    with pytest.raises(ValueError):
        plots.plot_replica_drift(steps, {})


def test_ring_schedule():
    n = 3
    sends = [[(r - s) % n for r in range(n)] for s in range(n - 1)]
    sends += [[(r + 1 - s) % n for r in range(n)] for s in range(n - 1)]
    fig = lesson_plots.plot_ring_schedule(sends)
    ax = fig.axes[0]
    assert len(ax.texts) == n * 2 * (n - 1)
    assert ax.texts[0].get_text() == "+ c0 → r1"
    renders(fig)
    with pytest.raises(ValueError):
        lesson_plots.plot_ring_schedule(sends[:3])


def test_allreduce_bytes_lines_follow_the_stored_values():
    curves = {"world_sizes": [2, 4, 8], "bytes_per_element": 2,
              "bytes_per_rank": {"1000": [2000.0, 3000.0, 3500.0], "1000000": [2e6, 3e6, 3.5e6]}}
    fig = lesson_plots.plot_allreduce_bytes(curves, measured={10: {2: 20.0, 4: 30.0}})
    ax_abs, ax_rel = fig.axes
    labelled(ax_abs)
    labelled(ax_rel)
    line = ax_abs.get_lines()[0]
    assert list(line.get_xdata()) == [2, 4, 8]
    assert list(line.get_ydata()) == [2000.0, 3000.0, 3500.0]
    assert list(ax_rel.get_lines()[0].get_ydata()) == [1.0, 1.5, 1.75]
    measured = [ln for ln in ax_rel.get_lines() if ln.get_marker() == "o"]
    assert len(measured) == 1
    assert list(measured[0].get_ydata()) == [1.0, 1.5]
    renders(fig)
    with pytest.raises(ValueError):
        lesson_plots.plot_allreduce_bytes(dict(curves, world_sizes=[2]))


def test_chapter_ring_figure_is_the_calculator():
    figure = load("01_ring_allreduce")["figure"]
    for m, values in figure["bytes_per_rank"].items():
        assert values == [ring_allreduce_bytes(int(m), 4, n) for n in figure["world_sizes"]]
    renders(lesson_plots.plot_allreduce_bytes(figure))


def test_alpha_beta_time():
    lat, bw = lesson_plots.alpha_beta_allreduce_time(6e6, 4, 1e9, 1e-5)
    assert lat == pytest.approx(6e-5)
    assert bw == pytest.approx(6e6 / 1e9)
    assert lesson_plots.alpha_beta_allreduce_time(0.0, 1, 1e9, 1e-5) == (0.0, 0.0)
    with pytest.raises(ValueError):
        lesson_plots.alpha_beta_allreduce_time(10, 2, 0, 1e-5)
    fig = lesson_plots.plot_allreduce_time([2, 4, 8], [4e6, 6e6, 7e6], 8, 1e9, 1e-5, num_params=10**6,
                                           bytes_per_element=4)
    ax = fig.axes[0]
    labelled(ax)
    total = ax.get_lines()[0]
    assert list(total.get_xdata()) == [2, 4, 8]
    assert total.get_ydata()[0] == pytest.approx((2e-5 + 4e-3) * 1e3)
    renders(fig)
    with pytest.raises(ValueError):
        lesson_plots.plot_allreduce_time([2, 4], [1.0, 2.0], 8, 1e9, 1e-5, num_params=1, bytes_per_element=4)


def test_allreduce_explorer_headless(capsys):
    box = lesson_plots.allreduce_explorer(world_size=4, num_params=1e6, bytes_per_element=4,
                                     bandwidth_gb_s=1.0, latency_us=10.0)
    r = box.last_result
    assert r["world_size"] == 4 and r["num_params"] == 10**6
    assert r["bytes_per_rank"] == ring_allreduce_bytes(10**6, 4, 4)
    assert r["time_s"] == pytest.approx(6 * 1e-5 + 1.5 * 4e6 / 1e9)
    assert "MB" in box.summary.value
    box.controls["world_size"].value = 2  # a slider drag recomputes
    assert box.last_result["bytes_per_rank"] == ring_allreduce_bytes(10**6, 4, 2)
    box.controls["bytes_per_element"].value = 2
    assert box.last_result["message_bytes"] == 2 * 10**6
    box.controls["num_params"].value = 5 * 10**9
    assert box.last_result["bytes_per_rank"] == ring_allreduce_bytes(5 * 10**9, 2, 2)
    assert box.update()["world_size"] == 2
    capsys.readouterr()
    for bad in (dict(bytes_per_element=3), dict(world_size=3), dict(num_params=123_457)):
        with pytest.raises(ValueError):
            lesson_plots.allreduce_explorer(**bad)


def test_format_count():
    assert plots.format_count(1.3e9) == "1.3B"
    assert plots.format_count(125_000_000) == "125M"
    assert plots.format_count(500) == "500"
    assert plots.format_count(10 ** 12) == "1T"
