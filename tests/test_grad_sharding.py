"""Fast unit tests for helpers.grad_sharding (lesson 06): layout, references, checks, figures."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import io
import math

import pytest
import torch
import torch.distributed as dist

from helpers import grad_sharding as gs
from helpers.cluster import run
from helpers.costs import adam_memory_bytes, ring_allreduce_bytes, ring_reduce_scatter_bytes
from helpers.ledger import CollectiveRecord, Ledger


# --------------------------------------------------------------------------- layout


@pytest.mark.parametrize("numel, n", [(10, 4), (8, 4), (2, 4), (0, 3), (244, 3), (1_000_003, 8), (5, 1)])
def test_owned_ranges_partition_the_real_elements(numel: int, n: int) -> None:
    s = gs.shard_size(numel, n)
    assert n * s >= numel > n * (s - 1) or numel == 0
    assert gs.padded_numel(numel, n) - numel < n
    ranges = [gs.owned_range(numel, n, r) for r in range(n)]
    covered = [i for start, stop in ranges for i in range(start, stop)] if numel < 10_000 else None
    if covered is not None:
        assert covered == list(range(numel))
    assert ranges[0][0] == 0 and ranges[-1][1] == numel


def test_owned_range_example_from_the_assignment() -> None:
    assert [gs.owned_range(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert gs.owned_range(2, 4, 3) == (2, 2)


def test_pad_flat_appends_zeros() -> None:
    padded = gs.pad_flat(torch.arange(1.0, 6.0), 3)
    assert padded.tolist() == [1, 2, 3, 4, 5, 0]


# --------------------------------------------------------------------------- references


def test_expected_owned_slices_are_chunks_of_the_padded_mean() -> None:
    per_rank = [gs.synthetic_flat_grad(7, r, seed=1) for r in range(3)]
    slices = gs.expected_owned_slices(per_rank)
    mean = torch.stack([g.double() for g in per_rank]).mean(0)
    assert torch.allclose(torch.cat(slices)[:7], mean)
    assert torch.cat(slices)[7:].eq(0).all() and all(s.numel() == 3 for s in slices)
    by_tokens = gs.expected_owned_slices(per_rank, denominator=5.0)
    assert torch.allclose(torch.cat(by_tokens)[:7], mean * 3 / 5)


def test_clip_reference_is_clip_grad_norm_on_everything() -> None:
    shards = gs.random_shards([[3, 2], [], [4]], seed=3)
    norm, clipped = gs.clip_reference(shards, 1.0)
    full = torch.cat([s for rank in shards for s in rank]).double()
    assert math.isclose(norm, float(full.norm()), rel_tol=1e-12)
    coef = 1.0 / (norm + gs.CLIP_EPS)
    assert torch.allclose(torch.cat([c for rank in clipped for c in rank]), full * coef)
    assert clipped[1] == []


# --------------------------------------------------------------------------- checks on fabricated results


def _fake_results(numel: int, n: int, seed: int, denominator: float | None = None, scale: float = 1.0):
    slices = gs.expected_owned_slices([gs.synthetic_flat_grad(numel, r, seed) for r in range(n)], denominator)
    return [{"shard": (scale * s).float(), "input_unchanged": True} for s in slices]


def _ledger(n: int, op: str, numel: int) -> Ledger:
    cost = ring_reduce_scatter_bytes if op.startswith("reduce_scatter") else ring_allreduce_bytes
    rec = CollectiveRecord(0, op, "float32", (numel,), numel, tuple(range(n)), cost(numel, 4, n), "SUM")
    return Ledger([[rec] for _ in range(n)])


def test_reduce_scatter_check_accepts_the_right_answer_and_names_mistakes() -> None:
    numel, n, seed = 11, 3, 4
    good = _ledger(n, "reduce_scatter_single", gs.padded_numel(numel, n))
    gs.assert_reduce_scattered(_fake_results(numel, n, seed), good, numel, seed)
    with pytest.raises(AssertionError, match="summed without dividing"):
        gs.assert_reduce_scattered(_fake_results(numel, n, seed, scale=3.0), good, numel, seed)
    with pytest.raises(AssertionError, match="all-reduce"):
        gs.assert_reduce_scattered(_fake_results(numel, n, seed), _ledger(n, "all_reduce", 12), numel, seed)
    whole = [{"shard": torch.zeros(numel), "input_unchanged": True} for _ in range(n)]
    with pytest.raises(AssertionError, match="whole reduced gradient"):
        gs.assert_reduce_scattered(whole, good, numel, seed)
    with pytest.raises(AssertionError, match="denominator"):
        gs.assert_reduce_scattered(_fake_results(numel, n, seed), good, numel, seed, denominator=7.0)


def test_clip_check_recognises_wrong_norms() -> None:
    shards = gs.random_shards([[5], [4], [3]], seed=2)
    norm, clipped = gs.clip_reference(shards, 1.0)
    ok = [{"norm": torch.tensor(norm, dtype=torch.float32), "shards": [c.float() for c in rank]} for rank in clipped]
    gs.assert_clipped(ok, shards, 1.0)
    local = [float(torch.cat(rank).norm()) for rank in shards]
    mean = [{"norm": torch.tensor(sum(local) / 3), "shards": r["shards"]} for r in ok]
    with pytest.raises(AssertionError, match="mean of the shard norms"):
        gs.assert_clipped(mean, shards, 1.0)
    unchanged = [{"norm": r["norm"], "shards": [s.clone() for s in rank]} for r, rank in zip(ok, shards)]
    with pytest.raises(AssertionError, match="in place"):
        gs.assert_clipped(unchanged, shards, 1.0)


def test_zero2_memory_check() -> None:
    gs.assert_zero2_memory(lambda p, n, k: 2 * p + (2 + k) * p / n, [(7_500_000_000, 64, 12), (10, 3, 8)])
    with pytest.raises(AssertionError, match="stage 1"):
        gs.assert_zero2_memory(lambda p, n, k: 4 * p + k * p / n, [(1000, 4, 12)])


# --------------------------------------------------------------------------- drivers on a real group


def _reference_reduce_scatter(flat, group=None, denominator=None):
    n = dist.get_world_size(group)
    padded = gs.pad_flat(flat, n)
    out = flat.new_empty(padded.numel() // n)
    dist.reduce_scatter_single(out, padded, group=group)
    return out / (n if denominator is None else denominator)


def test_reduce_scatter_driver_and_ledger_on_three_ranks() -> None:
    out, ledger = run(gs.reduce_scatter_on_rank, _reference_reduce_scatter, 10, 7, 4.0, world_size=3,
                      ledger=True, timeout=60)
    gs.assert_reduce_scattered(out, ledger, 10, 7, denominator=4.0)


# --------------------------------------------------------------------------- figures and explorer


def _renders(fig) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    assert buf.getvalue().startswith(b"\x89PNG")
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_figures_render() -> None:
    _renders(gs.plot_shard_norms([0.3, 0.4, 1.1], 1.2, 1.2))
    _renders(gs.plot_stage_memory(7_500_000_000, [1, 2, 64], marked={64: 1.66e10}))
    with pytest.raises(ValueError):
        gs.plot_shard_norms([], 1.0)


def test_stage_costs_and_explorer() -> None:
    costs = gs.stage_costs(1000, 4)
    assert costs["stage2_bytes"] == adam_memory_bytes(1000, 4, 2)
    assert math.isclose(costs["reduce_scatter_bytes"] + costs["all_gather_bytes"], costs["all_reduce_bytes"])
    box = gs.gradient_sharding_explorer(num_params=1e9, world_size=8)
    box.controls["world_size"].value = 16
    assert box.last_result["stage2_bytes"] == adam_memory_bytes(1_000_000_000, 16, 2)
