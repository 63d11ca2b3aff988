"""Fast unit tests for helpers.l05_optimizer_state_sharding and lesson 05's instructor side."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import io

import pytest
import torch
from torch import nn

from autograder.lessons import l05
from autograder.lessons.costs import adam_memory_bytes, zero_memory_parts
from helpers import l05_optimizer_state_sharding as lesson
from helpers.shared.state import SameInit, make_batches, mse, state_of, to_float64, uneven_mlp
from helpers.runtime.cluster import run
from helpers.runtime.ledger import CollectiveRecord, Ledger
from helpers.shared.models import TinyMLP
from helpers.shared.stored import load

HYPER = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


def _adam_after_steps(model: nn.Module, batches, hyper=HYPER) -> torch.optim.Adam:
    opt = torch.optim.Adam(model.parameters(), **hyper)
    for x, y in batches:
        opt.zero_grad()
        mse(model(x), y).backward()
        opt.step()
    return opt


# --------------------------------------------------------------------------- measuring


class _Holder:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_persistent_tensor_bytes_counts_each_storage_once_and_skips_excluded():
    p = nn.Parameter(torch.zeros(10))
    p.grad = torch.ones(10)
    flat = torch.zeros(6)
    holder = _Holder(params=[p], state={p: {"step": torch.tensor(3.0), "m": flat[:3], "v": flat[3:]}},
                     nested=_Holder(buf=torch.zeros(4, dtype=torch.float64)), name="x", group=None)
    # flat (6 x 4 B, once, although two views) + buf (4 x 8 B); p, p.grad and the 0-dim step excluded
    assert lesson.persistent_tensor_bytes(holder, [p, p.grad]) == 24 + 32
    assert lesson.persistent_tensor_bytes(holder) == 24 + 32 + 40  # now p counts (its grad is not reachable)


def test_persistent_tensor_bytes_of_torch_adam_is_8_bytes_per_element():
    model = TinyMLP()
    batches = make_batches(1, 4, 8, 4, seed=0)
    opt = _adam_after_steps(model, batches)
    params = list(model.parameters())
    held = lesson.persistent_tensor_bytes(opt, [*params, *(q.grad for q in params)])
    assert held == 8 * sum(q.numel() for q in params)


# --------------------------------------------------------------------------- references


def test_adam_reference_matches_float32_adam_and_skips_frozen():
    model_fn = SameInit(uneven_mlp, seed=1)
    batches = make_batches(3, 6, 5, 3, seed=2)
    params, moments = l05.adam_reference(model_fn(), batches, HYPER)
    model = model_fn()
    opt = _adam_after_steps(model, batches)
    frozen = next(n for n, q in model.named_parameters() if not q.requires_grad)
    assert frozen not in moments
    for name, q in model.named_parameters():
        assert torch.allclose(params[name].float(), q.detach(), atol=1e-5)
        if q.requires_grad:
            m, v, step = moments[name]
            assert step == 3.0
            assert torch.allclose(m.float(), opt.state[q]["exp_avg"], atol=1e-6)


def test_intermittent_layer_has_its_own_adam_step_count():
    model_fn = SameInit(l05.IntermittentMLP, seed=1)
    batches = make_batches(4, 6, 5, 3, seed=2)
    params, moments = l05.adam_reference(model_fn(), batches, HYPER)
    assert moments["side.weight"][2] == 2.0 and moments["body.weight"][2] == 4.0
    model = model_fn()
    opt = _adam_after_steps(model, batches)
    assert opt.state[model.side.weight]["step"] == 2
    for name, q in model.named_parameters():
        assert torch.allclose(params[name].float(), q.detach(), atol=1e-5)
    with pytest.raises(AssertionError, match="'side.weight' has Adam step 4, expected 2"):
        l05.assert_step_counts({"side.weight": (None, None, 4.0)}, moments, 4, "case")


def test_zero_owners_on_rank_is_the_documented_rule():
    numels = [5, 7, 7, 3, 10, 1, 7]
    out = run(lambda: l05.zero_owners_on_rank(numels), world_size=3, timeout=60)
    assert out == [[2, 1, 2, 0, 0, 2, 1]] * 3


@pytest.mark.parametrize("world_size", [3, 4])
def test_partition_reference_is_zeros_partition(world_size):
    cases = [*l05.PARTITION_CASES, l05.BIG_PARTITION]
    zero = run(lambda: [l05.zero_owners_on_rank(c) for c in cases], world_size=world_size, timeout=60)[0]
    assert zero == [l05.partition(c, world_size) for c in cases]


def test_stored_visible_references_are_float64_adam():
    for case, (model_fn, batch_args, hyper) in l05.VISIBLE_ADAM.items():
        params, moments = l05.adam_reference(model_fn(), make_batches(*batch_args), hyper)
        stored_params, stored_moments = lesson.stored_adam(case)
        assert stored_params.keys() == params.keys() and stored_moments.keys() == moments.keys()
        for name, t in params.items():
            torch.testing.assert_close(stored_params[name], t, atol=1e-9, rtol=1e-8)
        for name, (m, v, step) in moments.items():
            torch.testing.assert_close(stored_moments[name][0], m, atol=1e-12, rtol=1e-8)
            torch.testing.assert_close(stored_moments[name][1], v, atol=1e-15, rtol=1e-8)
            assert stored_moments[name][2] == step


def _min_world_size(psi, budget, k=12):
    return next((n for n in range(1, 10 ** 4) if adam_memory_bytes(psi, n, 1, k) <= budget), None)


def test_hidden_memory_checks():
    l05.check_zero1_bytes_per_rank(lambda psi, n, k: 4 * psi + k * psi / n)
    with pytest.raises(AssertionError, match="zero1_bytes_per_rank"):
        l05.check_zero1_bytes_per_rank(lambda psi, n, k: 2 * psi + (2 + k) * psi / n)
    with pytest.raises(AssertionError, match="must be an int or a float"):
        l05.check_zero1_bytes_per_rank(lambda psi, n, k: torch.tensor(4.0 * psi + k * psi / n))
    with pytest.raises(AssertionError):  # 1 M parameters in 4,000,001 B need 12 M ranks: a cut-off search fails
        l05.check_min_world_size(_min_world_size)


# --------------------------------------------------------------------------- checks


def test_assert_partition_accepts_agreeing_ranks_and_names_disagreement():
    numels, expected = [4, 4, 4, 4], [0, 1, 0, 1]
    lesson.assert_partition([expected, expected], numels, expected)
    with pytest.raises(AssertionError, match="pure function"):
        lesson.assert_partition([expected, [1, 0, 1, 0]], numels, expected)
    with pytest.raises(AssertionError, match="largest first"):
        lesson.assert_partition([[0, 0, 1, 1]] * 2, numels, expected)
    with pytest.raises(AssertionError, match="owners must be ints"):
        lesson.assert_partition([[0, 2, 0, 1]] * 2, numels, expected)


def test_assert_partition_balanced():
    lesson.assert_partition_balanced([0, 1, 0, 1], [4, 4, 4, 4], 2)
    with pytest.raises(AssertionError, match="spread"):
        lesson.assert_partition_balanced([0, 0, 0, 1], [4, 4, 4, 4], 2)


def _fake_rank(numels: dict[str, int], owned: list[str], reported: int | None = None, held: int | None = None):
    owned_bytes = 8 * sum(numels[n] for n in owned)
    return {"numels": numels, "state_bytes": owned_bytes if reported is None else reported,
            "held_bytes": owned_bytes if held is None else held}


def test_assert_state_memory():
    numels = {"a": 10, "b": 6, "c": 4}
    owners = [0, 1, 1]
    good = [_fake_rank(numels, ["a"]), _fake_rank(numels, ["b", "c"])]
    lesson.assert_state_memory(good, owners, "2 ranks")
    full = [_fake_rank(numels, ["a", "b", "c"]), _fake_rank(numels, ["a", "b", "c"])]
    with pytest.raises(AssertionError, match="holds 160 bytes"):
        lesson.assert_state_memory(full, owners, "2 ranks")
    lying = [_fake_rank(numels, ["a"], held=160), _fake_rank(numels, ["b", "c"])]
    with pytest.raises(AssertionError, match="owned parameters only"):
        lesson.assert_state_memory(lying, owners, "2 ranks")
    with pytest.raises(AssertionError, match="state_bytes"):
        lesson.assert_state_memory([_fake_rank(numels, ["a"], reported=84), good[1]], owners, "2 ranks")


def _identity(ids=True, ptrs=True, aliases=True, cleared=True, moved=True):
    init = {"w": torch.zeros(2)}
    return {"identity": {"ids_kept": ids, "ptrs_kept": ptrs, "aliases_see_update": aliases},
            "grads_cleared": cleared, "init": init, "params": {"w": torch.ones(2) if moved else torch.zeros(2)}}


@pytest.mark.parametrize("kwargs, message", [
    (dict(ids=False), "different objects"), (dict(aliases=False), "no longer shows"),
    (dict(cleared=False), "zero_grad"), (dict(moved=False), "no parameter moved"),
])
def test_assert_in_place(kwargs, message):
    lesson.assert_in_place([_identity()], "x")
    with pytest.raises(AssertionError, match=message):
        lesson.assert_in_place([_identity(**kwargs)], "x")


def test_assert_sharded_training_and_consolidated_on_single_process_adam():
    model_fn = SameInit(TinyMLP, seed=3)
    batches = make_batches(2, 8, 8, 4, seed=4)
    expected = l05.adam_reference(model_fn(), batches, HYPER)
    model = model_fn()
    opt = _adam_after_steps(model, batches)
    names = {id(q): n for n, q in model.named_parameters()}
    moments = lesson.moments_by_name(opt.state, names)
    rank0 = {"params": state_of(model), "init": state_of(model_fn()), "moments": moments,
             "consolidated": opt.state_dict()}
    lesson.assert_sharded_training([rank0], expected, "one rank")
    param_names = [n for n, _ in model.named_parameters()]
    sd = opt.state_dict()
    sd["param_groups"] = [{k: v for k, v in sd["param_groups"][0].items()
                           if k in ("lr", "betas", "eps", "weight_decay", "params")}]
    rank0["consolidated"] = sd
    lesson.assert_consolidated([rank0], param_names, expected[1], HYPER)
    sd["state"].pop(0)
    with pytest.raises(AssertionError, match="missing"):
        lesson.assert_consolidated([rank0], param_names, expected[1], HYPER)
    rank0["moments"] = dict(moments, extra=moments["fc1.weight"])
    with pytest.raises(AssertionError, match="unexpected"):
        lesson.assert_sharded_training([rank0], expected, "one rank")


# --------------------------------------------------------------------------- figure and explorer


def test_stored_memory_results_are_the_calculator():
    memory = load(lesson.STORED_MEMORY)
    curves = memory["curves"]
    psi = curves["num_params"]
    for stage in range(4):
        assert curves["bytes_per_rank"][str(stage)] == [adam_memory_bytes(psi, n, stage, 12)
                                                        for n in curves["world_sizes"]]
    assert [round(b / 1e9, 1) for b in memory["paper_figure_1"]["bytes_per_rank"]] == [120, 31.4, 16.6, 1.9]
    assert memory["budget"]["first_fitting_world_size"] == {"0": None, "1": 45, "2": 7, "3": 4}
    grid = load(lesson.STORED_EXPLORER)
    assert grid["parts"]["13000000000"]["16"][3] == [list(zero_memory_parts(13 * 10 ** 9, 8, s, 16)) for s in range(4)]


def test_plot_zero_memory_draws_the_stored_curves():
    curves = load(lesson.STORED_MEMORY)["curves"]
    fig = lesson.plot_zero_memory(curves, budget_bytes=32e9, measured={1: 800.0, 2: 400.0, 4: 210.0},
                                  measured_params=100)
    left, right = fig.axes
    for ax in (left, right):
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    for stage, line in enumerate(left.get_lines()[:4]):
        assert list(line.get_ydata()) == curves["bytes_per_rank"][str(stage)]
    assert list(right.get_lines()[0].get_ydata()) == [800.0, 400.0, 200.0]
    fig.savefig(io.BytesIO(), format="png", dpi=30)
    assert len(lesson.plot_zero_memory(curves).axes) == 1
    with pytest.raises(ValueError):
        lesson.plot_zero_memory(curves, measured={2: 400.0}, measured_params=100)


def test_memory_explorer_updates_from_sliders():
    box = lesson.memory_explorer(num_params=7.5e9, k=12, world_size=64, budget_gb=32.0)
    result = box.update()
    assert result["bytes_per_stage"] == {s: adam_memory_bytes(7_500_000_000, 64, s, 12) for s in range(4)}
    assert result["stages_that_fit"] == [1, 2, 3]
    box.controls["world_size"].value = 16
    assert box.last_result["stages_that_fit"] == [2, 3]
    box.controls["k"].value = 16
    assert box.last_result["bytes_per_stage"][1] == adam_memory_bytes(7_500_000_000, 16, 1, 16)
    for bad in (dict(num_params=7.4e9), dict(k=13), dict(world_size=45)):
        with pytest.raises(ValueError):
            lesson.memory_explorer(**bad)


# --------------------------------------------------------------------------- design exercise: equal flat shards


def test_adam_reference_clips_the_full_gradient_before_each_step():
    model_fn = SameInit(TinyMLP, seed=5)
    batches = make_batches(3, 6, 8, 4, seed=6)
    params, _ = l05.adam_reference(model_fn(), batches, dict(HYPER, weight_decay=0.01, max_norm=0.4))
    model = to_float64(model_fn())
    opt = torch.optim.Adam(model.parameters(), **dict(HYPER, weight_decay=0.01))
    for x, y in batches:
        opt.zero_grad()
        mse(model(x.double()), y.double()).backward()
        assert torch.nn.utils.clip_grad_norm_(model.parameters(), 0.4) > 0.4  # the visible case clips
        opt.step()
    for name, q in model.named_parameters():
        torch.testing.assert_close(params[name], q.detach(), atol=0, rtol=0)
    unclipped, _ = l05.adam_reference(model_fn(), batches, dict(HYPER, weight_decay=0.01, max_norm=None))
    assert not torch.allclose(unclipped["fc1.weight"], params["fc1.weight"], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("case", list(l05.FLAT_CASES))
def test_flat_cases_defeat_whole_parameter_ownership(case):
    """P is not a multiple of N and one parameter is larger than ceil(P/N): whole parameters cannot fit."""
    world_size, model_fn, _, _, ranks = l05.FLAT_CASES[case]
    n = world_size if ranks is None else len(ranks)
    numels = [q.numel() for q in model_fn().parameters()]
    assert sum(numels) % n != 0 and max(numels) > -(-sum(numels) // n)
    assert 8 * max(numels) > lesson.flat_state_budget_bytes(sum(numels), n)


def _ledger(per_step: list[list[str]], members=(0, 1, 2), constructor=("broadcast",)) -> Ledger:
    group = tuple(members)

    def record(op: str) -> CollectiveRecord:
        return CollectiveRecord(0, op, "float32", (4,), 4, group, 0.0)

    ops = [*constructor, "barrier"]
    for step in per_step:
        ops += [*step, "barrier"]
    size = max(members) + 1
    return Ledger([[record(op) for op in ops] if rank in members else [] for rank in range(size)])


def test_assert_flat_collectives():
    lesson.assert_flat_collectives(_ledger([["all_reduce", "all_gather_into_tensor"]] * 2), [0, 1, 2], 2, "x")
    five = ["reduce_scatter_tensor", "all_reduce", "broadcast", "broadcast", "broadcast"]
    lesson.assert_flat_collectives(_ledger([five], members=(1, 2, 3)), [1, 2, 3], 1, "x")
    with pytest.raises(AssertionError, match="step 2: 6 collectives.*at most N \\+ 2 = 5"):
        lesson.assert_flat_collectives(_ledger([five, [*five, "broadcast"]]), [0, 1, 2], 2, "x")
    with pytest.raises(AssertionError, match="all_gather_object pickles"):
        lesson.assert_flat_collectives(_ledger([["all_reduce", "all_gather_object"]]), [0, 1, 2], 1, "x")
    with pytest.raises(AssertionError, match="must not call barrier"):
        lesson.assert_flat_collectives(_ledger([["all_reduce", "barrier"]]), [0, 1, 2], 1, "x")


def test_assert_flat_state_memory():
    numels = {"w": 120, "b": 39}  # P = 159 on 4 ranks: budget 8 x 40 bytes
    assert lesson.flat_state_budget_bytes(159, 4) == 320
    ranks = [dict(_identity(), numels=numels, held_bytes=320) for _ in range(4)]
    lesson.assert_flat_state_memory(ranks, "4 ranks")
    ranks[2]["held_bytes"] = 8 * 42
    with pytest.raises(AssertionError, match="group rank 2: the optimizer holds 336 bytes.*budget is 8 x ceil"):
        lesson.assert_flat_state_memory(ranks, "4 ranks")
    with pytest.raises(AssertionError, match="no longer shows"):
        lesson.assert_flat_state_memory([dict(_identity(aliases=False), numels=numels, held_bytes=0)], "1 rank")
