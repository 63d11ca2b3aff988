"""Tests of lesson 06: the references (autograder.lessons.l06), the drivers, checks and figures of
helpers.l06_gradient_sharding, and the hidden checks' refusal of values that are not plain."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import contextlib
import io
import math
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from autograder.lessons import l06
from autograder.lessons.costs import adam_memory_bytes
from figure_checks import labelled, renders
from helpers import l06_gradient_sharding as gs
from helpers.runtime.cluster import run
from helpers.runtime.ledger import CollectiveRecord, Ledger

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ranks never import this module (nor autograder)


# --------------------------------------------------------------------------- references


@pytest.mark.parametrize("numel, n", [(10, 4), (8, 4), (2, 4), (0, 3), (244, 3), (1_000_003, 8), (5, 1)])
def test_owned_ranges_partition_the_real_elements(numel: int, n: int) -> None:
    s = l06.shard_size(numel, n)
    assert n * s >= numel > n * (s - 1) or numel == 0
    ranges = [l06.owned_range(numel, n, r) for r in range(n)]
    covered = [i for start, stop in ranges for i in range(start, stop)] if numel < 10_000 else None
    if covered is not None:
        assert covered == list(range(numel))
    assert ranges[0][0] == 0 and ranges[-1][1] == numel


def test_owned_range_example_from_the_assignment() -> None:
    assert [l06.owned_range(10, 4, r) for r in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert l06.owned_range(2, 4, 3) == (2, 2)


def test_expected_owned_slices_are_chunks_of_the_padded_mean() -> None:
    per_rank = [gs.synthetic_flat_grad(7, r, seed=1) for r in range(3)]
    slices = l06.expected_owned_slices(per_rank)
    mean = torch.stack([g.double() for g in per_rank]).mean(0)
    assert torch.allclose(torch.cat(slices)[:7], mean)
    assert torch.cat(slices)[7:].eq(0).all() and all(s.numel() == 3 for s in slices)
    by_tokens = l06.expected_owned_slices(per_rank, denominator=5.0)
    assert torch.allclose(torch.cat(by_tokens)[:7], mean * 3 / 5)


def test_visible_literals_are_the_reference() -> None:
    """The values the visible tests write by hand are what the references compute."""
    for numel, n in [(10, 4), (8, 4), (2, 4)]:
        gs.assert_owned_ranges(l06.owned_range, [(numel, n, [l06.owned_range(numel, n, r) for r in range(n)])])
    ramp = l06.expected_owned_slices([gs.synthetic_flat_grad(11, r) for r in range(3)])
    assert [s.tolist() for s in ramp] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 0]]
    assert [l06.owned_range(244, 3, r) for r in range(3)] == [(0, 82), (82, 164), (164, 244)]
    assert adam_memory_bytes(7_500_000_000, 64, 2, 12) == 16_640_625_000.0
    assert adam_memory_bytes(1000, 4, 2, 12) == 5500.0


def test_clipped_by_torch_is_clip_grad_norm_on_everything() -> None:
    shards = gs.random_shards([[3, 2], [], [4]], seed=3)
    norm, clipped = gs.clipped_by_torch(shards, 1.0)
    full = torch.cat([s for rank in shards for s in rank]).double()
    assert math.isclose(norm, float(full.norm()), rel_tol=1e-12)
    assert torch.allclose(torch.cat([c for rank in clipped for c in rank]), full / (norm + 1e-6))
    assert clipped[1] == []


# --------------------------------------------------------------------------- checks on fabricated results


def _fake_results(numel: int, n: int, seed: int | None, denominator: float | None = None, scale: float = 1.0):
    slices = l06.expected_owned_slices([gs.synthetic_flat_grad(numel, r, seed) for r in range(n)], denominator)
    return [{"shard": (scale * s).float(), "input_unchanged": True} for s in slices]


def _ledger(n: int, op: str, numel: int) -> Ledger:
    rec = CollectiveRecord(0, op, "float32", (numel,), numel, tuple(range(n)), 0.0, "SUM")
    return Ledger([[rec] for _ in range(n)])


def test_reduce_scatter_check_accepts_the_right_answer_and_names_mistakes() -> None:
    numel, n, seed = 11, 3, 4
    good = _ledger(n, "reduce_scatter_single", 12)
    l06.check_reduce_scattered(_fake_results(numel, n, seed), good, numel, seed)
    with pytest.raises(AssertionError, match="summed without dividing"):
        l06.check_reduce_scattered(_fake_results(numel, n, seed, scale=3.0), good, numel, seed)
    with pytest.raises(AssertionError, match="all-reduce"):
        l06.check_reduce_scattered(_fake_results(numel, n, seed), _ledger(n, "all_reduce", 12), numel, seed)
    whole = [{"shard": torch.zeros(numel), "input_unchanged": True} for _ in range(n)]
    with pytest.raises(AssertionError, match="whole reduced gradient"):
        l06.check_reduce_scattered(whole, good, numel, seed)
    with pytest.raises(AssertionError, match="denominator"):
        l06.check_reduce_scattered(_fake_results(numel, n, seed), good, numel, seed, denominator=7.0)
    ramp = [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18, 20, 0]]
    gs.assert_reduce_scattered(_fake_results(numel, n, None), good, numel, ramp)
    with pytest.raises(AssertionError, match="summed without dividing"):
        gs.assert_reduce_scattered(_fake_results(numel, n, None, scale=3.0), good, numel, ramp)


def test_reduce_scatter_check_rejects_one_slot_too_many_when_numel_is_a_multiple_of_n() -> None:
    numel, n, seed = 12, 4, 5  # S = 3; numel // N + 1 = 4 would pass every non-multiple
    l06.check_reduce_scattered(_fake_results(numel, n, seed), _ledger(n, "reduce_scatter_single", 12), numel, seed)
    longer = [{"shard": torch.cat([r["shard"], torch.zeros(1)]), "input_unchanged": True}
              for r in _fake_results(numel, n, seed)]
    with pytest.raises(AssertionError, match="expected the owner slice of S = 3"):
        l06.check_reduce_scattered(longer, _ledger(n, "reduce_scatter_single", 16), numel, seed)


class _Fake(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.allclose:
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_hidden_checks_accept_only_plain_values() -> None:
    numel, n, seed = 11, 3, 4
    fake = [{"shard": torch.zeros(4).as_subclass(_Fake), "input_unchanged": True} for _ in range(n)]
    with pytest.raises(AssertionError, match="plain data"):
        l06.check_reduce_scattered(fake, _ledger(n, "reduce_scatter_single", 12), numel, seed)
    with pytest.raises(AssertionError, match="plain data"):
        l06.check_owned_ranges(lambda numel, n, r: _Int(0), [(10, 4)])
    with pytest.raises(AssertionError, match="plain data"):
        l06.check_zero2_memory(lambda p, n, k: _Float(2 * p + (2 + k) * p / n), [(10, 3, 8)])


class _Int(int):
    pass


class _Float(float):
    pass


def test_owned_range_checks_name_the_mistakes() -> None:
    floor = lambda numel, n, r: (r * (numel // n), (r + 1) * (numel // n))  # noqa: E731
    unclamped = lambda numel, n, r: (r * -(-numel // n), (r + 1) * -(-numel // n))  # noqa: E731
    for check in (lambda fn: l06.check_owned_ranges(fn, [(10, 4)]),
                  lambda fn: gs.assert_owned_ranges(fn, [(10, 4, [(0, 3), (3, 6), (6, 9), (9, 10)])])):
        with pytest.raises(AssertionError, match="belong to nobody"):
            check(floor)
        with pytest.raises(AssertionError, match="Clamp both ends"):
            check(unclamped)
        with pytest.raises(AssertionError, match="tuple of two Python ints"):
            check(lambda numel, n, r: (0.0, 1.0))
        check(l06.owned_range)


def test_clip_check_recognises_wrong_norms_and_traffic() -> None:
    shards = gs.random_shards([[5], [4], [3]], seed=2)
    norm, clipped = gs.clipped_by_torch(shards, 1.0)
    ok = [{"norm": torch.tensor(norm, dtype=torch.float32), "shards": [c.float() for c in rank]} for rank in clipped]
    one_number = _ledger(3, "all_reduce", 1)
    l06.check_clipped(ok, one_number, shards, 1.0)
    local = [float(torch.cat(rank).norm()) for rank in shards]
    mean = [{"norm": torch.tensor(sum(local) / 3), "shards": r["shards"]} for r in ok]
    with pytest.raises(AssertionError, match="mean of the shard norms"):
        gs.assert_clipped(mean, shards, 1.0)
    unchanged = [{"norm": r["norm"], "shards": [s.clone() for s in rank]} for r, rank in zip(ok, shards)]
    with pytest.raises(AssertionError, match="in place"):
        gs.assert_clipped(unchanged, shards, 1.0)
    with pytest.raises(AssertionError, match="one all-reduce"):
        l06.check_clipped(ok, _ledger(3, "all_gather", 12), shards, 1.0)


def test_zero2_memory_checks() -> None:
    right = lambda p, n, k: 2 * p + (2 + k) * p / n  # noqa: E731
    gs.assert_zero2_memory(right, [(7_500_000_000, 64, 12, 16_640_625_000.0), (1000, 4, 12, 5500.0)])
    l06.check_zero2_memory(right, [(7_500_000_000, 64, 12), (10, 3, 8)])
    with pytest.raises(AssertionError, match="stage 1"):
        l06.check_zero2_memory(lambda p, n, k: 4 * p + k * p / n, [(1000, 4, 12)])
    with pytest.raises(AssertionError, match="2Ψ"):
        gs.assert_zero2_memory(lambda p, n, k: 4 * p + k * p / n, [(1000, 4, 12, 5500.0)])


# --------------------------------------------------------------------------- drivers on a real group


def _reference_reduce_scatter(flat, group=None, denominator=None):
    n = dist.get_world_size(group)
    s = -(-flat.numel() // n)
    padded = torch.cat([flat, flat.new_zeros(n * s - flat.numel())])
    out = flat.new_empty(s)
    dist.reduce_scatter_single(out, padded, group=group)
    return out / (n if denominator is None else denominator)


def _reference_clip(shard_grads, max_norm, group=None):
    squares = sum((g.double().pow(2).sum() for g in shard_grads), torch.zeros((), dtype=torch.float64)).float()
    dist.all_reduce(squares, group=group)
    norm = squares.sqrt()
    for g in shard_grads:
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm


def test_reduce_scatter_driver_and_ledger_on_three_ranks() -> None:
    out, ledger = run(gs.reduce_scatter_on_rank, _reference_reduce_scatter, 10, 7, 4.0, world_size=3,
                      ledger=True, timeout=60)
    l06.check_reduce_scattered(out, ledger, 10, 7, denominator=4.0)


def test_clip_driver_and_ledger_in_a_subgroup() -> None:
    shards = gs.random_shards([[5], [8], [2, 2]], seed=104)
    out, ledger = run(gs.clip_on_rank, _reference_clip, shards, 1.5, [0, 2, 3], world_size=4, ledger=True,
                      timeout=60)
    l06.check_clipped(out, ledger, shards, 1.5, [0, 2, 3])


def test_sharded_step_driver_against_ddp() -> None:
    from helpers.shared.models import TinyMLP, make_regression_batch
    from helpers.shared.state import SameInit

    x, y = make_regression_batch(12, in_features=8, out_features=4, seed=9)
    out = run(gs.sharded_versus_replicated_on_rank, l06.owned_range, _reference_reduce_scatter, _reference_clip,
              SameInit(TinyMLP, seed=8), x, y, 0.05, True, world_size=3, timeout=60)
    l06.check_matches_replicated(out, 244)



# --------------------------------------------------------------------------- design exercise 6: Zero2Optimizer


class _Keeper:
    """An object holding a shard with a .grad, a view of it and an Adam over it (what a design may keep)."""

    def __init__(self) -> None:
        self.shard = torch.zeros(10)
        self.view = self.shard[:4]
        self.optimizer = torch.optim.Adam([self.shard])
        self.shard.grad = torch.ones(10)
        self.optimizer.step()


def test_held_tensor_bytes_counts_reachable_tensors_their_grads_and_optimizer_state() -> None:
    params = [torch.nn.Parameter(torch.zeros(6))]
    params[0].grad = torch.ones(6)
    kept = gs.held_tensor_bytes(_Keeper(), params)
    assert kept == {"held": 4 * (10 + 10 + 2 * 10) + 4 * 6, "state": 4 * 2 * 10}  # step counters are 0-dim
    params[0].grad = None
    assert gs.held_tensor_bytes({"params": params, "alias": params[0].detach()}, params) == {"held": 0, "state": 0}


def test_zero2_budgets() -> None:
    adam, sgd, momentum = ("adam", {"lr": 0.1}), ("sgd", {"lr": 0.1}), ("sgd", {"lr": 0.1, "momentum": 0.9})
    assert [gs.state_tensors_per_element(s) for s in (sgd, momentum, adam)] == [0, 1, 2]
    assert gs.zero2_budget_bytes(244, 3, adam) == 4 * 82 * 4
    assert gs.zero2_step_bytes_limit(244, 3) == pytest.approx(2 * 2 / 3 * 4 * 246 + 64)


def _kept(held: int, state: int) -> dict:
    return {"numel": 244, "held_bytes": [{"held": held, "state": state}]}


def test_zero2_memory_check_names_the_mistakes() -> None:
    adam = ("adam", {"lr": 0.1})
    gs.assert_zero2_held_bytes([_kept(1312, 656)] * 3, adam, "ok")
    with pytest.raises(AssertionError, match="cut through parameters"):
        gs.assert_zero2_held_bytes([_kept(1024, 1024)] * 3, adam, "whole parameters")
    with pytest.raises(AssertionError, match="p.grad = None"):
        gs.assert_zero2_held_bytes([_kept(1960, 656)] * 3, adam, "full gradient kept")


def _step_ledger(step: list[CollectiveRecord], ranks: tuple[int, ...] = (0, 1, 2)) -> Ledger:
    barrier = CollectiveRecord(0, "barrier", "none", (), 0, ranks, 0.0, "")
    return Ledger([[barrier, *step, barrier] for _ in ranks])


def test_zero2_communication_check_names_the_mistakes() -> None:
    ranks = (0, 1, 2)
    rs = CollectiveRecord(1, "reduce_scatter_single", "float32", (246,), 246, ranks, 2 / 3 * 4 * 246, "SUM")
    ag = CollectiveRecord(3, "all_gather_single", "float32", (82,), 246, ranks, 2 / 3 * 4 * 246, "")
    scalar = CollectiveRecord(2, "all_reduce", "float32", (), 1, ranks, 2 * 2 / 3 * 4, "SUM")
    gs.assert_zero2_communication(_step_ledger([rs, scalar, ag]), [0, 1, 2], 244, 1, "ok")
    full = CollectiveRecord(1, "all_reduce", "float32", (246,), 246, ranks, 2 * 2 / 3 * 4 * 246, "SUM")
    with pytest.raises(AssertionError, match="all-reduce of 246 elements"):
        gs.assert_zero2_communication(_step_ledger([full, scalar, ag]), [0, 1, 2], 244, 1, "all-reduce")
    objects = CollectiveRecord(3, "all_gather_object", "object", (), 0, ranks, 0.0, "")
    with pytest.raises(AssertionError, match="pickles"):
        gs.assert_zero2_communication(_step_ledger([rs, objects]), [0, 1, 2], 244, 1, "objects")
    gather = CollectiveRecord(1, "all_gather_into_tensor", "float32", (246,), 738, ranks, 2 / 3 * 4 * 738, "")
    with pytest.raises(AssertionError, match="ring bytes sent"):
        gs.assert_zero2_communication(_step_ledger([gather, ag]), [0, 1, 2], 244, 1, "gather")
    with pytest.raises(AssertionError, match="must not call barrier"):
        gs.assert_zero2_communication(_step_ledger([rs, rs]), [0, 1, 2], 244, 2, "barriers")


# --------------------------------------------------------------------------- stored results, figures, explorer


def test_stored_results() -> None:
    layouts = l06.stored_layouts()
    assert layouts["num_params"] == 244 and layouts["layouts"][1]["ranges"][-1] == (164, 244)
    memory = l06.stored_stage_memory()
    at = memory["world_sizes"].index(64)
    assert round(memory["stage_bytes"][2][at] / 1e9, 1) == 16.6  # the ZeRO paper's Figure 1
    grid = l06.stored_explorer()
    assert {7_500_000_000, 10**12} <= set(grid["num_params"]) and 12 in grid["ks"]
    assert len(grid["stage_bytes"][0]) == len(grid["ks"]) and len(grid["stage_bytes"][0][0]) == 3
    for traffic in grid["traffic_bytes"][grid["num_params"].index(7_500_000_000)]:
        assert math.isclose(traffic["reduce_scatter_bytes"] + traffic["all_gather_bytes"], traffic["all_reduce_bytes"])


def test_figures_render() -> None:
    fig = gs.plot_shard_norms([0.3, 0.4, 1.1], 1.2, 1.2)
    labelled(fig.axes[0])
    renders(fig)
    memory = l06.stored_stage_memory()
    fig = gs.plot_stage_memory(memory["num_params"], memory["k"], memory["world_sizes"], memory["stage_bytes"],
                               marked={64: 1.66e10})
    labelled(fig.axes[0])
    assert "N = 64: 16.6 GB per rank" in [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    renders(fig)
    with pytest.raises(ValueError):
        gs.plot_shard_norms([], 1.0)
    with pytest.raises(ValueError):
        gs.plot_stage_memory(1, 12, [1, 2], memory["stage_bytes"][:2])


def test_explorer_looks_up_the_stored_grid() -> None:
    with contextlib.redirect_stdout(io.StringIO()):  # Output widgets print outside a kernel
        box = gs.gradient_sharding_explorer(num_params=1e9, world_size=8)
        assert box.last_result["stage2_bytes"] == adam_memory_bytes(1_000_000_000, 8, 2)
        box.controls["world_size"].value = 16
        assert box.last_result["stage2_bytes"] == adam_memory_bytes(1_000_000_000, 16, 2)
        box.controls["k"].value = 8
        assert box.last_result["stage1_bytes"] == adam_memory_bytes(1_000_000_000, 16, 1, 8)
        assert math.isclose(box.last_result["reduce_scatter_bytes"] + box.last_result["all_gather_bytes"],
                            box.last_result["all_reduce_bytes"])
    with pytest.raises(ValueError, match="not on the stored grid"):
        gs.gradient_sharding_explorer(world_size=3)
