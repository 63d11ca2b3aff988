"""Fast unit tests for helpers.l07_parameter_sharding.plots (lesson 07 figures and explorer; Agg backend, no gloo)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io
import math

import pytest

from autograder.lessons import l07
from autograder.lessons.costs import adam_memory_bytes, ring_allreduce_bytes
from figure_checks import labelled, renders
from helpers.l07_parameter_sharding import plots as pp
from helpers.shared.plots import format_bytes

PSI = 7_500_000_000


def test_stored_settings_only() -> None:
    assert pp.explorer_case(PSI, 8, 6) == pp.stored_results()["cases"][f"{PSI}/8/6"]
    with pytest.raises(ValueError, match="no stored result"):
        pp.explorer_case(PSI, 8, 5)
    with pytest.raises(ValueError, match="no stored result"):
        pp.plot_availability(7)


def test_availability_figure() -> None:
    fig = pp.plot_availability(3, (True, False))
    full_ax, grad_ax = fig.axes
    full_title, grad_title = full_ax.get_title(loc="left"), grad_ax.get_title(loc="left")
    assert full_title.startswith("FULL_SHARD") and "6 all-gathers" in full_title
    assert grad_title.startswith("SHARD_GRAD_OP") and "3 all-gathers" in grad_title
    assert grad_ax.get_xlabel()
    assert [t.get_text() for t in grad_ax.get_xticklabels()] == ["F0", "F1", "F2", "B2", "B1", "B0"]
    for ax, reshard in ((full_ax, True), (grad_ax, False)):
        cells = [p for p in ax.patches if p.get_gid() in ("computing", "held")]
        assert len(cells) == sum(len(s["gathered"]) for s in l07.availability(3, reshard)["slots"])
        assert sum(p.get_gid() == "computing" for p in cells) == 6
        markers = {kind: sum(line.get_gid() == kind for line in ax.lines)
                   for kind in ("all_gather", "reduce_scatter", "free")}
        events = l07.full_shard_schedule(3, reshard)
        assert markers == {kind: sum(e[0] == kind for e in events) for kind in markers}
    renders(fig)
    single = pp.plot_availability(2)
    assert len(single.axes) == 1 and "FULL_SHARD" in single.axes[0].get_title(loc="left")
    renders(single)
    with pytest.raises(ValueError):
        pp.plot_availability(2, ())


def test_live_memory_figure_marks_the_selected_peak() -> None:
    fig = pp.plot_live_parameter_memory(1_000_000_000, 8, 4, False)
    ax = fig.axes[0]
    labelled(ax, left_title=True)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t.split(":")[0] for t in legend] == ["replicated", "SHARD_GRAD_OP", "FULL_SHARD"]
    peak = l07.live_parameter_bytes(l07.split_params(1_000_000_000, 4), 8, False)["peak"]
    assert any(t.get_text() == f"peak {format_bytes(peak)}" for t in ax.texts)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == "before" and ticks[-1] == "optimizer" and len(ticks) == 2 * 4 + 2
    renders(fig)
    renders(pp.plot_live_parameter_memory(PSI, 2, 16, None))


def test_traffic_vs_memory_figure() -> None:
    fig = pp.plot_traffic_vs_memory(PSI, marked_world_size=64)
    ax_t, ax_m = fig.axes
    labelled(ax_t, left_title=True)
    labelled(ax_m, left_title=True)
    by_label = {line.get_label(): line for line in ax_t.lines if not line.get_label().startswith("_")}
    full = next(line for label, line in by_label.items() if label.startswith("FULL_SHARD"))
    ddp = next(line for label, line in by_label.items() if label.startswith("DDP"))
    ws = [2 ** e for e in range(1, 11)]
    assert list(full.get_xdata()) == ws
    assert list(full.get_ydata()) == pytest.approx([l07.fsdp_traffic_bytes(PSI, 2, n) for n in ws])
    assert list(ddp.get_ydata()) == pytest.approx([ring_allreduce_bytes(PSI, 2, n) for n in ws])
    assert full.get_ydata()[-1] / ddp.get_ydata()[-1] == pytest.approx(1.5)
    stage3 = next(line for line in ax_m.lines if line.get_label().startswith("stage 3"))
    assert list(stage3.get_ydata()) == pytest.approx([adam_memory_bytes(PSI, n, 3) for n in ws])
    assert any("×1.50" in t.get_text() for t in ax_t.texts)
    renders(fig)
    with pytest.raises(ValueError):
        pp.plot_traffic_vs_memory(PSI, marked_world_size=3)


def test_explorer_update_changes_the_output() -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = pp.param_sharding_explorer(num_units=4, world_size=8, num_params=1_000_000_000)
        first = dict(box.last_result)
        assert first["all_gathers"] == 8 and first["reduce_scatters"] == 4
        assert first["traffic_bytes"] == pytest.approx(l07.fsdp_traffic_bytes(10**9, 2, 8))
        assert first["traffic_ratio"] == pytest.approx(1.5)
        shard = math.ceil(250_000_000 / 8)
        assert first["between_steps_bytes"] == 4 * shard * 2
        assert first["peak_live_bytes"] == (4 * shard + 8 * shard) * 2
        summary = box.summary.value
        assert "FULL_SHARD" in summary

        box.controls["reshard_after_forward"].value = False
        assert box.last_result["all_gathers"] == 4 and box.last_result["traffic_ratio"] == pytest.approx(1.0)
        assert box.last_result["peak_live_bytes"] > box.last_result["replicated_bytes"]
        assert box.summary.value != summary

        box.controls["reshard_after_forward"].value = True
        box.controls["num_units"].value = 8            # smaller units: lower FULL_SHARD peak
        assert box.last_result["peak_live_bytes"] < first["peak_live_bytes"]
        box.controls["world_size"].value = 64
        assert box.last_result["stage3_bytes"] == adam_memory_bytes(10**9, 64, 3)
        box.controls["num_params"].value = 70_000_000_000
        result = box.update()
    assert result is box.last_result and result["num_params"] == 70_000_000_000
