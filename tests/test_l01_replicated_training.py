"""Unit tests for lesson 01: helpers.shared.state, helpers.shared.checks, its package and its instructor side."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autograder.lessons import l01
from autograder.lessons.costs import ring_allreduce_bytes
from helpers.shared import checks
from helpers.l01_replicated_training import (
    Perturb, aligned_on_rank, assert_all_ranks_return, assert_gradients_averaged,
    assert_parameter_identity, assert_ring_allreduce_bytes, assert_states_close, broadcast_on_rank)
from helpers.shared.state import (
    PerRankInit, SameInit, grads_of, make_batches, mean_of, mse, state_of, to_float64, uneven_mlp)
from helpers.shared.data import tensors_from_json, tensors_to_json
from helpers.shared.models import BatchNormMLP, TinyMLP, make_regression_batch, shard_batch
from helpers.shared.stored import load


# --------------------------------------------------------------------------- reference


def test_per_rank_init_differs_by_rank_and_leaves_global_rng_alone() -> None:
    fn = PerRankInit(TinyMLP, seed=5)
    torch.manual_seed(0)
    expected_next = torch.rand(3)
    torch.manual_seed(0)
    a0, a0_again, a1 = fn.for_rank(0), fn(), fn.for_rank(1)
    assert torch.equal(torch.rand(3), expected_next), "PerRankInit must not consume the global RNG"
    assert torch.equal(a0.fc1.weight, a0_again.fc1.weight), "outside a group fn() builds rank 0's model"
    assert not torch.equal(a0.fc1.weight, a1.fc1.weight)


def test_same_init_is_rank_independent() -> None:
    fn = SameInit(TinyMLP, seed=5)
    assert torch.equal(fn().fc2.weight, fn.for_rank(0).fc2.weight)


def test_uneven_mlp_has_frozen_first_weight() -> None:
    model = uneven_mlp()
    x, y = make_regression_batch(4, in_features=5, out_features=3)
    mse(model(x), y).backward()
    grads = grads_of(model)
    assert grads["0.weight"] is None
    assert all(g is not None for n, g in grads.items() if n != "0.weight")
    shapes = {tuple(p.shape) for p in model.parameters()}
    assert len(shapes) == len(list(model.parameters())), "parameter shapes should all differ"


def test_full_batch_gradient_equals_mean_of_equal_shard_gradients() -> None:
    model = TinyMLP()
    x, y = make_regression_batch(12, seed=3)
    full = l01.full_batch_gradients(model, x, y)
    shards = [l01.full_batch_gradients(model, *shard_batch(x, y, rank, 3)) for rank in range(3)]
    mean = mean_of(shards)
    assert set(full) == {n for n, _ in model.named_parameters()}
    for name in full:
        assert full[name].dtype == torch.float64
        torch.testing.assert_close(mean[name], full[name], atol=1e-12, rtol=1e-10)
    # and the shards really differ, so the identity is not trivial
    assert not torch.allclose(shards[0]["fc1.weight"], shards[1]["fc1.weight"])


def test_full_batch_gradients_does_not_touch_model() -> None:
    model = TinyMLP()
    before = state_of(model)
    l01.full_batch_gradients(model, *make_regression_batch(4))
    assert all(p.grad is None for p in model.parameters())
    assert checks.first_difference(state_of(model), before) is None


def test_sgd_reference_matches_manual_float64_steps() -> None:
    model = TinyMLP()
    batches = make_batches(2, 8, 8, 4, seed=9)
    out = l01.sgd_reference(model, batches, lr=0.1)
    manual = to_float64(model)
    for x, y in batches:
        grads = l01.full_batch_gradients(manual, x, y)
        with torch.no_grad():
            for name, p in manual.named_parameters():
                p -= 0.1 * grads[name]
    torch.testing.assert_close(out["fc1.weight"], manual.fc1.weight.detach(), atol=1e-14, rtol=0)
    assert out["step_count"].dtype == torch.long, "integer buffers keep their dtype"


def test_sgd_reference_skips_frozen_parameters() -> None:
    model = uneven_mlp()
    out = l01.sgd_reference(model, make_batches(2, 4, 5, 3), lr=0.5)
    assert torch.equal(out["0.weight"], model[0].weight.detach().double())
    assert not torch.equal(out["0.bias"], model[0].bias.detach().double())


def test_mean_of_keeps_none() -> None:
    a = {"w": torch.tensor([1.0, 3.0]), "f": None}
    b = {"w": torch.tensor([3.0, 5.0]), "f": None}
    out = mean_of([a, b])
    assert out["f"] is None
    assert torch.equal(out["w"], torch.tensor([2.0, 4.0], dtype=torch.float64))


def test_make_batches_deterministic_and_distinct() -> None:
    a = make_batches(3, 4, 5, 2, seed=1)
    b = make_batches(3, 4, 5, 2, seed=1)
    assert all(torch.equal(x1, x2) for (x1, _), (x2, _) in zip(a, b))
    assert not torch.equal(a[0][0], a[1][0])


# --------------------------------------------------------------------------- checks


def _grads(scale: float = 1.0) -> dict[str, torch.Tensor | None]:
    return {"a": torch.tensor([1.0, -2.0, 3.0]) * scale, "b": torch.tensor([[0.5]]) * scale, "frozen": None}


def test_scale_between() -> None:
    assert math.isclose(checks.scale_between(_grads(3.0), _grads()), 3.0)
    assert math.isnan(checks.scale_between(_grads(), {"a": torch.zeros(3)}))


def test_first_difference_exact_and_tolerant() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(4)}
    assert "'n'" in checks.first_difference(a, b)
    assert checks.first_difference(a, a) is None
    c = {"w": torch.tensor([1.0, 2.0001]), "n": torch.tensor(3)}
    assert checks.first_difference(a, c) is not None
    assert checks.first_difference(a, c, atol=1e-3, rtol=0) is None
    assert "missing" in checks.first_difference({"w": a["w"]}, a)


@pytest.mark.parametrize(
    "scale, world_size, phrase",
    [(3.0, 3, "sum with all_reduce without dividing by world_size=3"),
     (1 / 3, 3, "divide by world_size=3 twice"),
     (1 / 16, 4, "world_size**2"),
     (1.5, 3, "hard-code a divide by 2")],
)
def test_gradient_mistakes_are_named(scale: float, world_size: int, phrase: str) -> None:
    expected = {k: (None if v is None else v.double()) for k, v in _grads().items()}
    got = [_grads(scale) for _ in range(world_size)]
    with pytest.raises(AssertionError, match=phrase.replace("*", r"\*")):
        assert_gradients_averaged(got, expected, world_size)


def test_gradients_averaged_passes_and_flags_local_and_none() -> None:
    expected = {k: (None if v is None else v.double()) for k, v in _grads().items()}
    assert_gradients_averaged([_grads(), _grads()], expected, 2)
    local = [_grads(0.5), _grads(1.5)]
    with pytest.raises(AssertionError, match="still holds its own local gradient"):
        assert_gradients_averaged(local, expected, 2, local_per_rank=local)
    with pytest.raises(AssertionError, match="differ from rank 0"):
        assert_gradients_averaged([_grads(), _grads(1.1)], expected, 2)
    bad = _grads()
    bad["frozen"] = torch.zeros(1)
    with pytest.raises(AssertionError, match="Skip parameters whose .grad is None"):
        assert_gradients_averaged([bad, bad], expected, 2)


def test_assert_same_on_all_ranks_names_rank_and_tensor() -> None:
    s = {"w": torch.ones(2), "count": torch.tensor(1)}
    t = {"w": torch.ones(2), "count": torch.tensor(2)}
    checks.assert_same_on_all_ranks([s, s, s])
    with pytest.raises(AssertionError, match=r"Rank 2.*'count'"):
        checks.assert_same_on_all_ranks([s, s, t])


def test_assert_all_ranks_return() -> None:
    assert_all_ranks_return([True, True], True, "ok")
    with pytest.raises(AssertionError, match="ranks disagree"):
        assert_all_ranks_return([True, False, True], False, "c")
    with pytest.raises(AssertionError, match="Python bool"):
        assert_all_ranks_return([torch.tensor(True)] * 2, True, "c")
    with pytest.raises(AssertionError, match="buffer"):
        assert_all_ranks_return([True, True], False, "c")


def test_training_mismatch_names_scale_and_divergence() -> None:
    init = {"w": torch.zeros(3, dtype=torch.float64), "n": torch.tensor(0)}
    expected = {"w": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64), "n": torch.tensor(0)}
    got = {"w": torch.tensor([3.0, 6.0, 9.0]), "n": torch.tensor(0)}
    checks.assert_training_matches([expected, expected], init, expected, 2, "ref")
    with pytest.raises(AssertionError, match="updates are 3x"):
        checks.assert_training_matches([got] * 3, init, expected, 3, "ref")
    with pytest.raises(AssertionError, match="replicas diverged"):
        checks.assert_training_matches([expected, got], init, expected, 2, "ref")


def test_parameter_identity() -> None:
    assert_parameter_identity([1, 2], [1, 2], True)
    with pytest.raises(AssertionError, match="replaced"):
        assert_parameter_identity([1, 2], [1, 3], True)
    with pytest.raises(AssertionError, match="no longer updates"):
        assert_parameter_identity([1, 2], [1, 2], False)


@pytest.mark.parametrize(
    "wrong, phrase",
    [(lambda n, b, w: (w - 1) / w * n * b, "reduce-scatter only"),
     (lambda n, b, w: 2 * (w - 1) * n * b, "not the whole message"),
     (lambda n, b, w: 2.0 * n * b, "< 2 x bytes")],
)
def test_ring_bytes_mistakes_are_named(wrong, phrase: str) -> None:
    expected = {(10, 4, 3): 2 * 2 / 3 * 40}
    assert_ring_allreduce_bytes(ring_allreduce_bytes, expected)
    with pytest.raises(AssertionError, match=phrase):
        assert_ring_allreduce_bytes(wrong, expected)


class _Sneaky(float):
    def __eq__(self, other: object) -> bool:
        return True


def test_hidden_ring_check_takes_numbers_only() -> None:
    l01.check_ring_allreduce_bytes(ring_allreduce_bytes)
    with pytest.raises(AssertionError, match="must be an int or a float"):
        l01.check_ring_allreduce_bytes(lambda n, b, w: _Sneaky(ring_allreduce_bytes(n, b, w)))
    with pytest.raises(AssertionError, match="reduce-scatter only"):
        l01.check_ring_allreduce_bytes(lambda n, b, w: (w - 1) / w * n * b)


def test_stored_results_are_the_references() -> None:
    expected = l01.sgd_reference(PerRankInit(TinyMLP, seed=100).for_rank(0),
                                 make_batches(3, 8, 8, 4, seed=200), lr=0.1)
    assert_states_close(tensors_from_json(load("01_train_replicated_visible")), expected, 1e-8, 1e-8,
                               what="stored visible expectation")
    ring = load("01_ring_allreduce")
    assert ring["tables"]["244"]["3"] == pytest.approx(ring_allreduce_bytes(244, 4, 3))
    grid = load("01_allreduce_explorer")
    i = grid["world_sizes"].index(64)
    assert grid["bytes_per_rank"]["2"]["1300000000"][i] == ring_allreduce_bytes(1_300_000_000, 2, 64)


def test_stored_tensors_drop_rounding_noise_of_exact_zeros() -> None:
    # A key-bias gradient is exactly 0 in theory and ~1e-18 in float64, with bits that depend
    # on the thread count: stored files must not change with it.
    t = torch.tensor([0.117211027123, 6.5e-19, -1.7e-20, 0.0], dtype=torch.float64)
    assert tensors_to_json({"g": t})["g"]["values"] == [0.117211027, 0.0, 0.0, 0.0]
    assert tensors_to_json({"z": torch.zeros(2, dtype=torch.float64)})["z"]["values"] == [0.0, 0.0]


# --------------------------------------------------------------------------- on a real gloo group


def _average(model: nn.Module, group=None) -> None:
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


def _broadcast(model: nn.Module, src: int = 0, group=None) -> None:
    import torch.distributed as dist

    for t in list(model.parameters()) + list(model.buffers()):
        dist.broadcast(t.data, src=src, group=group)


class _Wrapper(nn.Module):
    """A minimal correct design of the exercise's wrapper (hooks), or without the buffer broadcast of forward."""

    def __init__(self, module: nn.Module, group=None, sync_buffers: bool = True) -> None:
        import torch.distributed as dist

        super().__init__()
        self.module, self.group, self.sync_buffers = module, group, sync_buffers
        self.first = 0 if group is None else dist.get_global_rank(group, 0)
        _broadcast(module, self.first, group)
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda p: _average_param(p, group))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import torch.distributed as dist

        if self.sync_buffers:
            for b in self.module.buffers():
                dist.broadcast(b, src=self.first, group=self.group)
        return self.module(x)


def _average_param(p: nn.Parameter, group) -> None:
    import torch.distributed as dist

    dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=group)


def _no_buffer_sync(module: nn.Module, group=None) -> nn.Module:
    return _Wrapper(module, group, sync_buffers=False)


def _average_on_default_group(model: nn.Module, group=None) -> None:
    _average(model)


def test_subgroup_check_accepts_group_aware_code_and_names_the_default_group() -> None:
    l01.check_average_in_subgroup(_average, ranks=[0, 2, 3], seed=7)
    with pytest.raises(AssertionError, match=r"only ranks \[0, 2, 3\] call it, and ranks \[1\] never do"):
        l01.check_average_in_subgroup(_average_on_default_group, ranks=[0, 2, 3], seed=7)


def test_ddp_reference_matches_float64() -> None:
    from helpers.runtime.cluster import run

    model_fn = PerRankInit(l01.UnusedHead, seed=7)
    batches = make_batches(3, 12, 8, 4, seed=2)
    out = run(l01.train_wrapped_on_rank, l01.real_ddp, model_fn, batches, 0.1, 0.0, None, world_size=3, timeout=60)
    init = model_fn.for_rank(0)
    checks.assert_training_matches(out, state_of(init), l01.sgd_reference(init, batches, 0.1), 3, "float64")


def test_design_checks_accept_a_correct_wrapper() -> None:
    l01.check_replicated_construction(_Wrapper)
    l01.check_replicated_gradients(_Wrapper)
    l01.check_replicated_training(_Wrapper)


def test_design_checks_name_the_buffer_rule_and_reject_real_ddp() -> None:
    with pytest.raises(AssertionError, match="Only buffers differ"):
        l01.check_replicated_training(_no_buffer_sync)
    with pytest.raises(AssertionError, match="is not your design"):
        l01.check_replicated_training(l01.real_ddp)


def test_rank_side_drivers_on_a_group() -> None:
    from helpers.runtime.cluster import run

    out = run(broadcast_on_rank, _broadcast, PerRankInit(BatchNormMLP, seed=1), 1, 6,
              world_size=3, timeout=60)
    assert not torch.equal(out[0]["before"]["bn.running_mean"], out[1]["before"]["bn.running_mean"])
    assert int(out[2]["before"]["bn.num_batches_tracked"]) == 3
    for o in out:
        assert_states_close(o["after"], out[1]["before"], 0.0, 0.0, what="broadcast")
        assert_parameter_identity(o["ids_before"], o["ids_after"], o["optimizer_moved"])
    swap = [Perturb(2, "fc1.weight", "swap")]
    res = run(aligned_on_rank, lambda m: _changed(m), SameInit(BatchNormMLP, seed=1),
              swap, in_features=6, world_size=3, timeout=60)
    assert [r for r, _ in res] == [True, True, False]
    assert all(untouched for _, untouched in res)


def _changed(model: nn.Module) -> bool:
    """Rank-local: does this rank's fc1.weight differ from a fresh SameInit copy? (test probe)."""
    fresh = SameInit(BatchNormMLP, seed=1)()
    return torch.equal(fresh.fc1.weight, model.fc1.weight)
