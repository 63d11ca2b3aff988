"""Fast unit tests for helpers.l03_gradient_buckets.plots (lesson 03 figures and explorer; Agg backend, no kernel)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io

import pytest

from figure_checks import labelled, renders
from autograder.lessons import l03
from helpers.l03_gradient_buckets import plots as bp

MiB = 2**20

TINY_BYTES = [512, 64, 64, 64, 256, 16]  # TinyMLP's gradients


def test_format_binary_bytes() -> None:
    assert bp.format_binary_bytes(0) == "0 B"
    assert bp.format_binary_bytes(1023) == "1023 B"
    assert bp.format_binary_bytes(8 * 1024) == "8 KiB"
    assert bp.format_binary_bytes(25 * MiB) == "25 MiB"
    assert bp.format_binary_bytes(3 * 2**30) == "3 GiB"


def test_synthetic_layers_ready_in_reverse_registration_order() -> None:
    sizes, ready = bp.synthetic_layers(num_layers=3, weight_bytes=400, bias_bytes=8, layer_backward_s=0.5)
    assert sizes == [400, 8] * 3
    assert ready == [1.5, 1.5, 1.0, 1.0, 0.5, 0.5]
    with pytest.raises(ValueError):
        bp.synthetic_layers(num_layers=0)


def test_best_caps_finds_the_floor_of_the_stored_sweep() -> None:
    sweep = l03.stored_synthetic()["sweep"]
    rows = sweep["rows"]
    sizes, _ = bp.synthetic_layers()
    assert rows[0][0] < min(sizes) and rows[-1][0] == sum(sizes)
    lo, hi, best = bp.best_caps(rows)
    # U shape: both ends are much worse than the floor, which is one layer per bucket
    assert rows[0][1] > 5 * best and rows[-1][1] > 5 * best
    assert 8 * 1024 < lo <= hi < 8 * MiB + 8 * 1024
    assert best == pytest.approx(l03.allreduce_seconds(8 * MiB + 8 * 1024, 8, 100e-6, 1e-10))
    with pytest.raises(ValueError):
        bp.best_caps([])


def test_bucket_assignment_figure() -> None:
    bks = l03.assign_buckets(TINY_BYTES, 300, 100)
    fig = bp.plot_bucket_assignment(TINY_BYTES, bks, bucket_cap_bytes=300, first_bucket_cap_bytes=100)
    ax = fig.axes[0]
    labelled(ax, left_title=True)
    bars = [p for p in ax.patches if p.get_height() in TINY_BYTES and p.get_width() == pytest.approx(0.8)]
    assert len(bars) == len(TINY_BYTES)
    # ready order on the x axis: the concatenated buckets, labelled by registration index
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(i) for b in bks for i in b]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "first-bucket cap = 100 B" in legend and "bucket cap = 300 B" in legend
    assert [t.get_text().split("\n")[0] for t in ax.texts] == [f"bucket {k}" for k in range(len(bks))]
    renders(fig)
    named = bp.plot_bucket_assignment(TINY_BYTES, bks, [f"p{i}" for i in range(6)], bucket_cap_bytes=10**9)
    assert named.axes[0].get_xticklabels()[0].get_text() == "p5"
    assert "off the chart" in named.axes[0].get_title()
    renders(named)
    with pytest.raises(ValueError):
        bp.plot_bucket_assignment(TINY_BYTES, [[5, 4], [4, 3]])
    with pytest.raises(ValueError):
        bp.plot_bucket_assignment(TINY_BYTES, [[6]])


def test_timeline_shows_backward_buckets_and_tail() -> None:
    sizes, ready = bp.synthetic_layers(num_layers=6, weight_bytes=4 * MiB, bias_bytes=4096, layer_backward_s=2e-3)
    bks = l03.assign_buckets(sizes, 8 * MiB, MiB)
    schedule = l03.communication_schedule(ready, sizes, bks, 4, 50e-6, 1e-10)
    tail = l03.communication_tail(ready, sizes, bks, 4, 50e-6, 1e-10)
    fig = bp.plot_bucket_timeline(ready, bks, schedule)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time since backward started (ms)" and ax.get_title()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["communication", "backward"]
    boxes = [c for c in ax.collections if c.__class__.__name__ == "PolyCollection"]
    # one grey backward bar + one box per bucket, spanning start..finish in ms
    assert len(boxes) == 1 + len(bks)
    for box, (_, start, finish) in zip(boxes[1:], schedule):
        x0, x1 = box.get_paths()[0].vertices[:, 0].min(), box.get_paths()[0].vertices[:, 0].max()
        assert (x0, x1) == pytest.approx((start * 1e3, finish * 1e3))
    assert any(f"{tail * 1e3:.3g} ms" in t.get_text() for t in ax.texts)
    assert f"tail after backward {tail * 1e3:.3g} ms" in ax.get_title()
    renders(fig)
    # a later backward end shortens the exposed tail
    later = bp.plot_bucket_timeline(ready, bks, schedule, backward_end_s=max(ready) + tail / 2)
    assert f"{tail / 2 * 1e3:.3g} ms" in later.axes[0].get_title()
    cases = {label: (b, l03.communication_schedule(ready, sizes, b, 4, 50e-6, 1e-10)) for label, b in
             {"per tensor": l03.assign_buckets(sizes, 1), "caps": bks, "one": [list(range(len(sizes)))[::-1]]}.items()}
    many = bp.plot_bucket_timelines(ready, cases, title="three caps")
    assert len(many.axes) == 3 and many.axes[0].get_title(loc="left").startswith("per tensor:")
    assert many.axes[2].get_xlabel() and many.axes[0].get_shared_x_axes().joined(many.axes[0], many.axes[2])
    renders(many)
    with pytest.raises(ValueError):
        bp.plot_bucket_timeline(ready, bks, schedule[:-1])
    with pytest.raises(ValueError):
        bp.plot_bucket_timeline(ready[:-2], bks, schedule)
    with pytest.raises(ValueError):
        bp.plot_bucket_timelines(ready, {})


def test_tail_vs_cap_marks_best_and_current_cap() -> None:
    sweep = l03.stored_synthetic()["sweep"]
    fig = bp.plot_tail_vs_cap(sweep["rows"], sweep["per_tensor_tail_s"], sweep["one_bucket_tail_s"],
                              marked_cap=25 * MiB, title=bp.network_title(8, 100e-6, 1e-10, MiB))
    ax = fig.axes[0]
    labelled(ax, left_title=True)
    assert ax.get_xscale() == "log" and ax.get_title() == "N = 8, α = 100 µs, 1/β = 10 GB/s, first bucket 1 MiB"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("best caps") for t in legend)
    assert any(t.startswith("cap 25 MiB: 5.81 ms") for t in legend)
    assert any(t.startswith("everything in one bucket: 36.7 ms") for t in legend)
    assert fig.axes[1].get_ylabel().startswith("number of buckets")
    renders(fig)
    small = [[1, 0.3, 3], [100, 0.2, 2], [1000, 0.25, 1]]
    renders(bp.plot_tail_vs_cap(small, 0.3, 0.25, title="small"))
    with pytest.raises(ValueError):
        bp.plot_tail_vs_cap(small, 0.3, 0.25, marked_cap=7, title="small")


def _events(delays_ms: list[tuple[float, float, float]]) -> list[tuple[str, int, float]]:
    """Synthetic communication-hook events: per bucket (launch, enqueued, done) in ms."""
    out = [(kind, k, t / 1e3) for k, triple in enumerate(delays_ms)
           for kind, t in zip(("launch", "enqueued"), triple[:2])]
    out += [("done", k, triple[2] / 1e3) for k, triple in enumerate(delays_ms)]
    return out


def test_enqueue_vs_completion() -> None:
    events = _events([(0.0, 0.2, 12.0), (3.0, 3.1, 13.0), (6.0, 6.5, 15.0)])
    fig = bp.plot_enqueue_vs_completion(events, marks={"backward returned": 7.0 / 1e3})
    ax_t, ax_b = fig.axes
    labelled(ax_t, left_title=True)
    labelled(ax_b, left_title=True)
    assert ax_b.get_xscale() == "log"
    widths = sorted(round(p.get_width(), 6) for p in ax_b.patches)
    assert widths == sorted([0.2, 0.1, 0.5, 12.0, 10.0, 9.0])
    assert [t.get_text() for t in ax_b.get_yticklabels()] == ["bucket 0", "bucket 1", "bucket 2"]
    assert "backward returned" in [t.get_text() for t in ax_t.get_legend().get_texts()]
    renders(fig)
    # two iterations' events are paired launch by launch
    second = [(kind, b, t + 0.1) for kind, b, t in events]
    fig2 = bp.plot_enqueue_vs_completion(events + second)
    assert [t.get_text() for t in fig2.axes[1].get_yticklabels()][3] == "bucket 0 (#2)"
    with pytest.raises(ValueError):
        bp.plot_enqueue_vs_completion([("launch", 0, 0.0), ("enqueued", 0, 0.1)])
    with pytest.raises(ValueError):
        bp.plot_enqueue_vs_completion([])


def test_explorer_looks_up_the_stored_grid() -> None:
    grid = l03.stored_explorer()
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = bp.bucket_explorer()
        first = dict(box.last_result)
        synthetic = l03.stored_synthetic()
        assert first["num_buckets"] == 7
        assert first["tail_s"] == pytest.approx(synthetic["cases"][1]["tail_s"], rel=1e-9)
        assert f"{first['tail_s'] * 1e3:.3g} ms" in box.summary.value
        summary = box.summary.value

        box.controls["bucket_cap"].value = max(grid["caps_bytes"])     # one big bucket after the first
        assert box.last_result["num_buckets"] == 2
        assert box.last_result["tail_s"] > first["tail_s"]
        assert box.summary.value != summary

        big = box.last_result["tail_s"]
        box.controls["world_size"].value = 64                          # more ranks: dearer all-reduces
        assert box.last_result["tail_s"] > big

        box.controls["alpha_us"].value = box.controls["alpha_us"].options[-1][1]
        assert box.last_result["alpha_s"] == pytest.approx(1e-3)
        box.controls["bandwidth_gb_s"].value = 1
        assert box.last_result["beta_s_per_byte"] == pytest.approx(1e-9)
        box.controls["first_bucket_cap"].value = 25 * MiB
        assert box.last_result["first_bucket_cap_bytes"] == 25 * MiB
        result = box.update()
    assert result is box.last_result
    lo, hi = result["best_caps_bytes"]
    assert lo <= hi and result["best_tail_s"] <= result["tail_s"]
    assert result["first_start_s"] > first["first_start_s"]
    with pytest.raises(ValueError, match="not on the stored grid"):
        bp.bucket_explorer(world_size=3)
