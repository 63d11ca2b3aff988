"""Fast unit tests for helpers.param_sharding_plots (lesson 07 figures and explorer; Agg backend, no gloo)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io
import math

import pytest

from figure_checks import labelled, renders
from helpers import param_sharding_plots as pp
from helpers.costs import adam_memory_bytes, ring_allreduce_bytes
from helpers.param_sharding import fsdp_traffic_bytes, full_shard_schedule






def test_timeline_inserts_compute_into_the_schedule() -> None:
    timeline = pp.step_timeline(2, True)
    assert timeline == [("all_gather", 0), ("forward", 0), ("free", 0), ("all_gather", 1), ("forward", 1),
                        ("free", 1), ("all_gather", 1), ("backward", 1), ("reduce_scatter", 1), ("free", 1),
                        ("all_gather", 0), ("backward", 0), ("reduce_scatter", 0), ("free", 0)]
    for units in range(1, 6):
        for reshard in (True, False):
            tl = pp.step_timeline(units, reshard)
            assert [e for e in tl if e[0] not in ("forward", "backward")] == full_shard_schedule(units, reshard)
    assert pp.step_timeline(0) == []


def test_timeline_rejects_a_schedule_that_computes_on_freed_parameters() -> None:
    with pytest.raises(ValueError, match="freed"):
        pp.step_timeline(1, events=[("all_gather", 0), ("free", 0), ("reduce_scatter", 0)])
    with pytest.raises(ValueError):
        pp.step_timeline(2, events=[("all_gather", 0), ("reduce_scatter", 0), ("free", 0)])
    with pytest.raises(ValueError):
        pp.step_timeline(1, events=[("broadcast", 0)])


def test_availability_full_shard_holds_one_unit_shard_grad_op_all() -> None:
    full = pp.availability(4, True)
    assert [(s["phase"], s["unit"]) for s in full] == [("forward", u) for u in range(4)] + [
        ("backward", u) for u in (3, 2, 1, 0)]
    assert all(s["gathered"] == [s["unit"]] for s in full)
    assert full[-1]["after"] == [("reduce_scatter", 0), ("free", 0)]
    grad_op = pp.availability(4, False)
    assert [s["gathered"] for s in grad_op] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2],
                                                [0, 1], [0]]
    assert grad_op[4]["before"] == []            # no re-gather at the turn


def test_split_params() -> None:
    assert pp.split_params(10, 3) == [4, 3, 3]
    assert sum(pp.split_params(7_500_000_000, 7)) == 7_500_000_000
    with pytest.raises(ValueError):
        pp.split_params(10, 0)


def test_live_parameter_bytes() -> None:
    numels, n, b = [70, 77, 24], 2, 4
    shards = [35, 39, 12]
    full = pp.live_parameter_bytes(numels, n, True, b)
    assert full["between_steps"] == sum(shards) * b
    assert [x for _, _, x in full["slots"]] == [(sum(shards) + n * s) * b for s in (35, 39, 12, 12, 39, 35)]
    assert full["peak"] == (sum(shards) + n * 39) * b and full["peak_slot"] == 1
    grad_op = pp.live_parameter_bytes(numels, n, False, b)
    assert grad_op["peak"] == (sum(shards) + n * sum(shards)) * b and grad_op["peak_slot"] == 2
    replicated = pp.live_parameter_bytes(numels, n, None, b)
    assert replicated["peak"] == replicated["between_steps"] == sum(numels) * b
    # SHARD_GRAD_OP's peak exceeds replicated training: full parameters plus the shards
    assert grad_op["peak"] > replicated["peak"] > full["peak"] > full["between_steps"]
    with pytest.raises(ValueError):
        pp.live_parameter_bytes([], 2)


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
        assert len(cells) == sum(len(s["gathered"]) for s in pp.availability(3, reshard))
        assert sum(p.get_gid() == "computing" for p in cells) == 6
        markers = {kind: sum(line.get_gid() == kind for line in ax.lines)
                   for kind in ("all_gather", "reduce_scatter", "free")}
        events = full_shard_schedule(3, reshard)
        assert markers == {kind: sum(e[0] == kind for e in events) for kind in markers}
    renders(fig)
    single = pp.plot_availability(2)
    assert len(single.axes) == 1 and "FULL_SHARD" in single.axes[0].get_title(loc="left")
    renders(single)
    with pytest.raises(ValueError):
        pp.plot_availability(0)


def test_live_memory_figure_marks_the_selected_peak() -> None:
    numels = pp.split_params(1_000_000, 4)
    fig = pp.plot_live_parameter_memory(numels, 8, False)
    ax = fig.axes[0]
    labelled(ax, left_title=True)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [t.split(":")[0] for t in legend] == ["replicated", "SHARD_GRAD_OP", "FULL_SHARD"]
    peak = pp.live_parameter_bytes(numels, 8, False)["peak"]
    assert any(t.get_text() == f"peak {pp.format_bytes(peak)}" for t in ax.texts)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == "before" and ticks[-1] == "optimizer" and len(ticks) == 2 * 4 + 2
    renders(fig)
    renders(pp.plot_live_parameter_memory([70, 77, 24], 2, None, bytes_per_param=4))


def test_traffic_vs_memory_figure() -> None:
    psi = 7_500_000_000
    fig = pp.plot_traffic_vs_memory(psi, [1, 2, 8, 64], marked_world_size=64)
    ax_t, ax_m = fig.axes
    labelled(ax_t, left_title=True)
    labelled(ax_m, left_title=True)
    by_label = {line.get_label(): line for line in ax_t.lines if not line.get_label().startswith("_")}
    full = next(line for label, line in by_label.items() if label.startswith("FULL_SHARD"))
    ddp = next(line for label, line in by_label.items() if label.startswith("DDP"))
    assert list(full.get_xdata()) == [2, 8, 64]              # N = 1 skipped
    assert list(full.get_ydata()) == pytest.approx([fsdp_traffic_bytes(psi, 2, n) for n in (2, 8, 64)])
    assert list(ddp.get_ydata()) == pytest.approx([ring_allreduce_bytes(psi, 2, n) for n in (2, 8, 64)])
    assert full.get_ydata()[-1] / ddp.get_ydata()[-1] == pytest.approx(1.5)
    stage3 = next(line for line in ax_m.lines if line.get_label().startswith("stage 3"))
    assert list(stage3.get_ydata()) == pytest.approx([adam_memory_bytes(psi, n, 3) for n in (2, 8, 64)])
    assert any("×1.50" in t.get_text() for t in ax_t.texts)
    renders(fig)
    with pytest.raises(ValueError):
        pp.plot_traffic_vs_memory(psi, [1])


def test_explorer_update_changes_the_output() -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = pp.param_sharding_explorer(num_units=4, world_size=8, num_params=1e9)
        first = dict(box.last_result)
        assert first["all_gathers"] == 8 and first["reduce_scatters"] == 4
        assert first["traffic_bytes"] == pytest.approx(fsdp_traffic_bytes(10**9, 2, 8))
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
        box.controls["num_params"].value = 1e8
        result = box.update()
    assert result is box.last_result and result["num_params"] == 10**8
