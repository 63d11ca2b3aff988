"""Fast unit tests for helpers.plots and helpers.widgets (Agg backend, no kernel)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")


import pytest

from figure_checks import labelled, renders
from helpers import plots, widgets
from helpers.costs import ring_allreduce_bytes






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
    fig = plots.plot_ring_schedule(sends)
    ax = fig.axes[0]
    assert len(ax.texts) == n * 2 * (n - 1)
    assert ax.texts[0].get_text() == "+ c0 → r1"
    renders(fig)
    with pytest.raises(ValueError):
        plots.plot_ring_schedule(sends[:3])


def test_allreduce_bytes_lines_follow_formula():
    sizes = [1000, 10**6]
    fig = plots.plot_allreduce_bytes([1, 2, 4, 8], sizes, 2, measured={10: {2: 20.0, 4: 30.0}})
    ax_abs, ax_rel = fig.axes
    labelled(ax_abs)
    labelled(ax_rel)
    line = ax_abs.get_lines()[0]
    assert list(line.get_xdata()) == [2, 4, 8]  # N = 1 sends nothing and is skipped on the log axis
    assert list(line.get_ydata()) == [ring_allreduce_bytes(1000, 2, n) for n in (2, 4, 8)]
    measured = [ln for ln in ax_rel.get_lines() if ln.get_marker() == "o"]
    assert len(measured) == 1
    assert list(measured[0].get_ydata()) == [1.0, 1.5]
    renders(fig)
    with pytest.raises(ValueError):
        plots.plot_allreduce_bytes([1], sizes)


def test_alpha_beta_time():
    lat, bw = plots.alpha_beta_allreduce_time(10**6, 4, 4, 1e9, 1e-5)
    assert lat == pytest.approx(6e-5)
    assert bw == pytest.approx(1.5 * 4e6 / 1e9)
    assert plots.alpha_beta_allreduce_time(10, 4, 1, 1e9, 1e-5) == (0.0, 0.0)
    with pytest.raises(ValueError):
        plots.alpha_beta_allreduce_time(10, 4, 2, 0, 1e-5)
    fig = plots.plot_allreduce_time(10**6, 4, 8, 1e9, 1e-5, max_world_size=64)
    ax = fig.axes[0]
    labelled(ax)
    total = ax.get_lines()[0]
    assert min(total.get_xdata()) == 2 and max(total.get_xdata()) == 64
    renders(fig)


def test_allreduce_explorer_headless(capsys):
    box = widgets.allreduce_explorer(world_size=4, num_params=1e6, bytes_per_element=4,
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
    assert box.update()["world_size"] == 2
    capsys.readouterr()
    with pytest.raises(ValueError):
        widgets.allreduce_explorer(bytes_per_element=3)
