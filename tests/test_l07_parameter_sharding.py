"""Tests of lesson 07: the references, drivers and hidden checks (autograder.lessons.l07), the student-side drivers
and checks (helpers.l07_parameter_sharding) against real FSDP2, and the chapter's stored numbers."""
from __future__ import annotations

import math
import sys
from typing import Any, Sequence

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons import l07
from helpers import l07_parameter_sharding as P
from helpers.runtime.cluster import run
from helpers.shared.models import TinyLM
from helpers.shared.state import SameInit, make_batches, mse

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ranks never import this module (nor autograder)

# Known-correct solutions of exercises 4 and 5, to test the checks with. They live here, not in
# autograder.lessons.l07: no hidden check may send a solution to a student's kernel (issue 23).


class ReferenceShardedUnit:
    """A correct ``FullyShardedUnit`` (the exercise's contract), for testing the checks; never shipped to a kernel."""

    def __init__(self, module: nn.Module, group: Any = None) -> None:
        self.module, self.group = module, group
        self.params = list(module.parameters())
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        self.shard_size = -(-self.numel // world)
        flat = torch.zeros(world * self.shard_size)
        flat[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = nn.Parameter(flat[rank * self.shard_size: (rank + 1) * self.shard_size].clone())
        self.full = flat
        offset = 0
        for p in self.params:
            p.data = self.full[offset: offset + p.numel()].view_as(p)
            offset += p.numel()
        module.register_forward_pre_hook(lambda m, args: self.gather())
        module.register_forward_hook(self._after_forward)
        self.free()

    def _after_forward(self, module: nn.Module, args: Any, out: torch.Tensor) -> None:
        self.free()
        if out.requires_grad:  # fires when backward reaches this unit's output: re-gather first
            out.register_hook(lambda grad: self.gather())

    def gather(self) -> None:
        """Re-allocate the full buffer and all-gather every rank's shard into it."""
        storage = self.full.untyped_storage()
        if storage.nbytes() == 0:
            storage.resize_(self.full.numel() * self.full.element_size())
        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)

    def free(self) -> None:
        """Release the full buffer's memory (its views stay valid for the next gather)."""
        self.full.untyped_storage().resize_(0)

    def reduce_gradients(self) -> None:
        """Reduce-scatter the mean gradient into ``shard.grad``; clear the module's gradients."""
        world = dist.get_world_size(self.group)
        flat = torch.zeros(world * self.shard_size)
        flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        out = torch.empty(self.shard_size)
        dist.reduce_scatter_single(out, flat, group=self.group)
        self.shard.grad = out / world
        for p in self.params:
            p.grad = None


def reference_train(model: nn.Module, units: Sequence[Any], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    lr: float) -> list[float]:
    """A correct ``train_full_shard`` (SGD over the shards, one step per batch), for testing the checks."""
    opt = torch.optim.SGD([u.shard for u in units], lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = mse(model(x), y)
        loss.backward()
        for u in units:
            u.reduce_gradients()
            u.free()
        opt.step()
        losses.append(loss.item())
    return losses


def test_schedule_example_and_counts() -> None:
    assert l07.full_shard_schedule(1) == [("all_gather", 0), ("free", 0), ("all_gather", 0), ("reduce_scatter", 0),
                                          ("free", 0)]
    for units in range(5):
        for reshard in (True, False):
            events = l07.full_shard_schedule(units, reshard)
            assert sum(e[0] == "all_gather" for e in events) == (2 if reshard else 1) * units
            assert sum(e[0] == "reduce_scatter" for e in events) == units
            gathered: set[int] = set()
            for kind, u in events:  # a unit is gathered exactly when it is used, and freed at the end
                if kind == "all_gather":
                    assert u not in gathered
                    gathered.add(u)
                elif kind == "free":
                    gathered.remove(u)
                else:
                    assert u in gathered
            assert not gathered


@pytest.mark.parametrize("reshard", [True, False])
def test_schedule_and_traffic_match_real_fsdp2(reshard: bool) -> None:
    widths = (8, 12, 8, 4)
    counts, ledger = run(P.fsdp2_counts_on_rank, widths, reshard, world_size=2, ledger=True, timeout=60)
    l07.check_matches_fsdp2(l07.full_shard_schedule, counts[0], ledger, reshard)
    l07.check_traffic_measured(l07.fsdp_traffic_bytes, ledger, 8 * 12 + 12 + 12 * 8 + 8 + 8 * 4 + 4, reshard)
    with pytest.raises(AssertionError, match="real FSDP2"):
        l07.check_matches_fsdp2(lambda u, r: l07.full_shard_schedule(u, not r), counts[0], ledger, reshard)


def test_traffic_closed_forms() -> None:
    assert l07.fsdp_traffic_bytes(1000, 2, 4) == pytest.approx(3 * 0.75 * 2000)
    assert l07.fsdp_traffic_bytes(1000, 2, 4, reshard_after_forward=False) == pytest.approx(2 * 0.75 * 2000)
    assert l07.fsdp_traffic_bytes(1000, 2, 1) == 0
    with pytest.raises(AssertionError, match="expected"):
        l07.check_traffic(lambda p, b, n, r: 3 * p * b, [(1000, 2, 4, True)])


def test_checks_take_only_plain_values() -> None:
    class Anything(list):
        def __eq__(self, other: object) -> bool:
            return True

    with pytest.raises(AssertionError, match="plain data"):
        l07.check_schedule(lambda u, r: Anything(), [(2, True)])

    class Number(float):
        pass

    with pytest.raises(AssertionError, match="int or a float"):
        l07.check_traffic(lambda p, b, n, r: Number(l07.fsdp_traffic_bytes(p, b, n, r)), [(1000, 2, 4, True)])


def test_unit_parameters_keeps_ties_at_the_root() -> None:
    lm = TinyLM()
    owners = l07.unit_parameters(lm, ["embed", "blocks.0", "head"])
    assert owners["embed"] == owners["head"] == []
    assert owners[""][0] == "embed.weight"
    assert sorted(n for names in owners.values() for n in names) == sorted(n for n, _ in lm.named_parameters())
    shared = nn.Linear(2, 2)
    assert l07.unit_parameters(nn.Sequential(nn.Sequential(shared, shared)), ["0"]) == {
        "0": ["0.0.weight", "0.0.bias"], "": []}


def test_unit_parameters_check_names_the_split_tie() -> None:
    def both(model, unit_names):
        out = {u: [] for u in [*unit_names, ""]}
        for name, _ in model.named_parameters(remove_duplicate=False):
            out[next((u for u in unit_names if name.startswith(u + ".")), "")].append(name)
        return out

    with pytest.raises(AssertionError, match="appears in two units"):
        l07.check_unit_parameters(both, TinyLM(), ["embed", "head"])


def test_reference_unit_trains_like_full_batch_sgd_and_frees() -> None:
    model_fn = SameInit(P.layered_mlp, seed=1, kwargs={"widths": (5, 9, 7, 2)})
    batches = make_batches(3, 12, 5, 2, seed=2)
    out, ledger = run(P.shard_train_on_rank, ReferenceShardedUnit, reference_train, model_fn, batches, 0.1,
                      world_size=3, ledger=True, timeout=60)
    l07.assert_sharded_training(out, model_fn, batches, 0.1, ledger)
    assert out[0]["shard_numel"] == [18, 24, 6]   # ceil(54/3), ceil(70/3), ceil(16/3)


def _train_on_full_params(model, units, batches, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for u in units:
            u.reduce_gradients()
            u.free()
        opt.step()
    return [0.0] * len(batches)


def test_training_check_names_an_optimizer_on_full_parameters() -> None:
    model_fn = SameInit(P.layered_mlp, seed=3, kwargs={"widths": (4, 6, 2)})
    batches = make_batches(2, 4, 4, 2, seed=4)
    out, ledger = run(P.shard_train_on_rank, ReferenceShardedUnit, _train_on_full_params, model_fn, batches, 0.1,
                      world_size=2, ledger=True, timeout=60)
    with pytest.raises(AssertionError, match="stepping the shards"):
        l07.assert_sharded_training(out, model_fn, batches, 0.1, ledger)


def test_unit_step_of_the_reference_passes_the_visible_and_the_hidden_check() -> None:
    case = l07.VISIBLE_UNIT
    batch = make_batches(**case["batch"])[0]
    out, ledger = run(P.unit_step_on_rank, ReferenceShardedUnit, case["model_fn"], batch, world_size=2,
                      ledger=True, timeout=60)
    assert out[0]["shard_numel"] == [35, 39, 12]
    assert out[0]["during_forward"] == [[0, [280, 0, 0]], [1, [0, 312, 0]], [2, [0, 0, 96]]]
    assert out[0]["during_backward"] == [[2, [0, 0, 96]], [1, [0, 312, 96]], [0, [280, 312, 96]]]
    assert out[0]["after_backward"] == [280, 312, 96]   # re-gathered by backward, freed by the caller
    P.assert_unit_step(out, case["model_fn"], batch, ledger, P.stored_expected("unit_gradients"))
    l07.check_unit_step(out, case["model_fn"], batch, ledger)


class _RebindingUnit(ReferenceShardedUnit):
    """Issue 24: free() drops only the unit's reference; gather() allocates a new buffer and re-points the
    parameters."""

    def gather(self) -> None:
        self.full = torch.empty(self.shard_size * torch.distributed.get_world_size(self.group))
        offset = 0
        for p in self.params:
            p.data = self.full[offset: offset + p.numel()].view_as(p)
            offset += p.numel()
        torch.distributed.all_gather_single(self.full, self.shard.detach(), group=self.group)

    def free(self) -> None:
        self.full = torch.empty(0)


def test_unit_bytes_are_read_from_the_parameters_storages() -> None:
    """The parameters still view the buffer a rebinding free() dropped: its bytes count, and the check fails."""
    case = l07.VISIBLE_UNIT
    batch = make_batches(**case["batch"])[0]
    out, ledger = run(P.unit_step_on_rank, _RebindingUnit, case["model_fn"], batch, world_size=2, ledger=True,
                      timeout=60)
    assert out[0]["after_init"] == [280, 312, 96] and out[0]["after_step"] == [280, 312, 96]
    with pytest.raises(AssertionError, match="right after wrapping"):
        l07.check_unit_step(out, case["model_fn"], batch, ledger)


class _FreshBufferUnit(ReferenceShardedUnit):
    """gather() points the parameters at a fresh buffer, free() at empty tensors: autograd's saved weights keep
    the forward's buffer alive until backward."""

    def gather(self) -> None:
        full = torch.empty(self.shard_size * torch.distributed.get_world_size(self.group))
        torch.distributed.all_gather_single(full, self.shard.detach(), group=self.group)
        offset = 0
        for p, shape in zip(self.params, self.shapes):
            p.data = full[offset: offset + shape.numel()].view(shape)
            offset += shape.numel()

    def free(self) -> None:
        self.shapes = getattr(self, "shapes", [p.shape for p in self.params])
        super().free()
        for p in self.params:
            p.data = torch.empty(0)


def test_unit_bytes_count_what_autograd_saved() -> None:
    """The parameters hold nothing after free(), but the weights autograd saved still hold the gathered buffer."""
    case = l07.VISIBLE_UNIT
    batch = make_batches(**case["batch"])[0]
    out, ledger = run(P.unit_step_on_rank, _FreshBufferUnit, case["model_fn"], batch, world_size=2, ledger=True,
                      timeout=60)
    assert out[0]["after_init"] == [0, 0, 0]
    assert out[0]["after_forward"] == [0, 312, 96]   # unit 0's input needs no gradient: its weight is not saved
    with pytest.raises(AssertionError, match="while unit 2's forward ran"):
        l07.check_unit_step(out, case["model_fn"], batch, ledger)


class _AllReducingUnit(ReferenceShardedUnit):
    def reduce_gradients(self) -> None:
        world = torch.distributed.get_world_size(self.group)
        flat = torch.zeros(world * self.shard_size)
        flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        torch.distributed.all_reduce(flat, group=self.group)
        rank = torch.distributed.get_rank(self.group)
        self.shard.grad = flat[rank * self.shard_size: (rank + 1) * self.shard_size] / world
        for p in self.params:
            p.grad = None


def test_unit_step_check_bounds_the_traffic() -> None:
    case = l07.VISIBLE_UNIT
    batch = make_batches(**case["batch"])[0]
    out, ledger = run(P.unit_step_on_rank, _AllReducingUnit, case["model_fn"], batch, world_size=2, ledger=True,
                      timeout=60)
    assert P.step_bytes_bound(case["model_fn"](), 2) == 1032   # 3 (N-1) S 4 summed over S = 35, 39, 12
    with pytest.raises(AssertionError, match="sent 1,376 ring bytes"):
        l07.check_unit_step(out, case["model_fn"], batch, ledger)


class _SummingUnit(ReferenceShardedUnit):
    def reduce_gradients(self) -> None:
        super().reduce_gradients()
        self.shard.grad = self.shard.grad * torch.distributed.get_world_size(self.group)


def test_unit_step_check_names_a_sum_instead_of_a_mean() -> None:
    model_fn = SameInit(P.layered_mlp, seed=7, kwargs={"widths": (5, 9, 7, 2)})
    batch = make_batches(1, 6, 5, 2, seed=8)[0]
    out, ledger = run(P.unit_step_on_rank, _SummingUnit, model_fn, batch, world_size=3, ledger=True, timeout=60)
    with pytest.raises(AssertionError, match="3.00 x the mean"):
        l07.check_unit_step(out, model_fn, batch, ledger)


def test_visible_training_case_is_the_stored_one() -> None:
    case = l07.VISIBLE_TRAIN
    expected = l07.sgd_full_batch(case["model_fn"], make_batches(**case["batches"]), case["lr"])
    stored = P.stored_expected("trained_state")
    assert set(stored) == set(expected)
    assert all(torch.allclose(stored[k], expected[k], atol=1e-8) for k in expected)


def test_availability_full_shard_holds_one_unit_shard_grad_op_all() -> None:
    full = l07.availability(4, True)
    slots = full["slots"]
    assert [(s["phase"], s["unit"]) for s in slots] == [("forward", u) for u in range(4)] + [
        ("backward", u) for u in (3, 2, 1, 0)]
    assert all(s["gathered"] == [s["unit"]] for s in slots)
    assert full["after"] == [["reduce_scatter", 0], ["free", 0]]
    assert (full["all_gathers"], full["reduce_scatters"], full["max_gathered"]) == (8, 4, 1)
    grad_op = l07.availability(4, False)
    assert [s["gathered"] for s in grad_op["slots"]] == [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3], [0, 1, 2, 3],
                                                         [0, 1, 2], [0, 1], [0]]
    assert grad_op["slots"][4]["before"] == []            # no re-gather at the turn
    for units in range(1, 6):  # the boundaries hold exactly the schedule's events
        for reshard in (True, False):
            step = l07.availability(units, reshard)
            events = [tuple(e) for s in step["slots"] for e in s["before"]] + [tuple(e) for e in step["after"]]
            assert events == l07.full_shard_schedule(units, reshard)


def test_split_params() -> None:
    assert l07.split_params(10, 3) == [4, 3, 3]
    assert sum(l07.split_params(7_500_000_000, 7)) == 7_500_000_000


def test_live_parameter_bytes() -> None:
    numels, n, b = [70, 77, 24], 2, 4
    shards = [35, 39, 12]
    full = l07.live_parameter_bytes(numels, n, True, b)
    assert full["between_steps"] == sum(shards) * b
    assert full["slots"] == [(sum(shards) + n * s) * b for s in (35, 39, 12, 12, 39, 35)]
    assert full["peak"] == (sum(shards) + n * 39) * b and full["peak_slot"] == 1
    grad_op = l07.live_parameter_bytes(numels, n, False, b)
    assert grad_op["peak"] == (sum(shards) + n * sum(shards)) * b and grad_op["peak_slot"] == 2
    replicated = l07.live_parameter_bytes(numels, n, None, b)
    assert replicated["peak"] == replicated["between_steps"] == sum(numels) * b
    # SHARD_GRAD_OP's peak exceeds replicated training: full parameters plus the shards
    assert grad_op["peak"] > replicated["peak"] > full["peak"] > full["between_steps"]


def test_explorer_grid_covers_the_chapter_and_its_questions() -> None:
    grid = l07.explorer_results()
    case = grid["cases"]["7500000000/8/6"]
    assert case["traffic"]["True"] / case["ddp_traffic"] == pytest.approx(1.5)
    shard = math.ceil(1_250_000_000 / 8)
    assert case["live"]["True"]["peak"] == (6 * shard + 8 * shard) * 2
    # question 1: 8 units keep the FULL_SHARD peak of a 7.5 B model on 8 ranks below 4 GB, 6 do not
    assert grid["cases"]["7500000000/8/8"]["live"]["True"]["peak"] < 4e9 < case["live"]["True"]["peak"]
    chapter = l07.chapter_results()
    assert chapter["fsdp2_comparison"]["unit_sizes"] == [108, 104, 36]
    assert chapter["zero_example"]["stages"][3] == pytest.approx(16 * 7.5e9 / 64)


def test_unit_parameters_nested_units_and_prefixes() -> None:
    owners = l07.unit_parameters(TinyLM(), ["blocks.0", "blocks.0.mlp"])
    assert owners["blocks.0.mlp"] and all(n.startswith("blocks.0.mlp.") for n in owners["blocks.0.mlp"])
    assert not any(n.startswith("blocks.0.mlp.") for n in owners["blocks.0"])   # the innermost unit claims
    owners = l07.unit_parameters(nn.Sequential(*[nn.Linear(2, 2) for _ in range(11)]), ["1", "10"])
    assert owners["1"] == ["1.weight", "1.bias"] and owners["10"] == ["10.weight", "10.bias"]
    shared = nn.Linear(2, 2)
    assert l07.unit_parameters(nn.Sequential(nn.Sequential(shared, shared)), ["0", "0.0", "0.1"])["0"] == [
        "0.0.weight", "0.0.bias"]   # shared by two inner units: the innermost unit holding both uses

    def first_listed(model, unit_names):
        out = {u: [] for u in [*unit_names, ""]}
        for name, _ in model.named_parameters():
            out[next((u for u in unit_names if name.startswith(u + ".")), "")].append(name)
        return out

    with pytest.raises(AssertionError, match="innermost"):
        l07.check_unit_parameters(first_listed, TinyLM(), ["blocks.0", "blocks.0.mlp"])


def test_reference_unit_trains_on_a_subgroup_with_several_batches_per_call() -> None:
    l07.check_unit_in_subgroup(ReferenceShardedUnit, (5, 9, 7, 2), ranks=[1, 3], seed=9)
    model_fn = SameInit(P.layered_mlp, seed=1, kwargs={"widths": (5, 9, 2)})
    batches = make_batches(3, 6, 5, 2, seed=2)
    out, ledger = run(P.shard_train_on_rank, ReferenceShardedUnit, reference_train, model_fn, batches, 0.1,
                      batches_per_call=2, world_size=3, ledger=True, timeout=60)
    assert len(out[0]["leftover_bytes"]) == 2   # calls of 2 and 1 batches
    l07.assert_sharded_training(out, model_fn, batches, 0.1, ledger)


def test_no_solution_of_an_exercise_is_left_in_the_grading_module() -> None:
    """Issue 23: what the hidden checks send to the ranks solves neither the unit nor the loop exercise."""
    for module in (l07, l07.drivers, l07.verdicts, l07.stored):
        assert not hasattr(module, "ReferenceShardedUnit") and not hasattr(module, "reference_train")
    model = P.layered_mlp((4, 6, 2))
    log: list = []
    units = [l07.RecordingUnit(m, u, log) for u, m in enumerate(model[::2])]
    assert [u.shard.numel() for u in units] == [30, 14]   # the whole unit on every rank: nothing is sharded
    assert "optim" not in l07.step_shards_by_hand.__code__.co_names


def test_hidden_unit_training_accepts_the_reference_and_names_a_sum() -> None:
    model_fn = SameInit(P.layered_mlp, seed=3, kwargs={"widths": (5, 9, 9, 7, 2)})
    batches = make_batches(3, 12, 5, 2, seed=13)
    l07.check_unit_trains(ReferenceShardedUnit, model_fn, batches, 0.05, world_size=3)
    with pytest.raises(AssertionError, match="differ from single-process SGD"):
        l07.check_unit_trains(_SummingUnit, model_fn, batches, 0.05, world_size=3)


def _reduce_all_then_free_all(model, units, batches, lr):
    opt = torch.optim.SGD([u.shard for u in units], lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        for u in reversed(units):
            u.reduce_gradients()
        opt.step()   # after every reduce_gradients(), before the frees: allowed
        for u in units:
            u.free()
        losses.append(float(loss))
    return losses


def _train_variant(*, free=True, optimizer_on_shards=True, step="each", gather=False, loss_forward=False,
                   free_first=False):
    """A wrong (or right) train_full_shard; the keywords name the mistake."""
    def train(model, units, batches, lr):
        opt = torch.optim.SGD([u.shard for u in units] if optimizer_on_shards else model.parameters(), lr=lr)
        losses = []
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            if gather:
                for u in units:
                    u.gather()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if step == "before_reduce":
                opt.step()
            for u in units:
                if free_first:
                    u.free()
                u.reduce_gradients()
                if free and not free_first:
                    u.free()
            if step == "each":
                opt.step()
            if loss_forward:
                losses.append(torch.nn.functional.mse_loss(model(x), y).item())
            else:
                losses.append(loss.item())
        if step == "after_loop":
            opt.step()
        return losses
    return train


@pytest.mark.parametrize("train, message", [
    (reference_train, None),
    (_reduce_all_then_free_all, None),
    (_train_variant(free=False), "0 calls of free"),
    (_train_variant(optimizer_on_shards=False), "did not change between its reduce_gradients"),
    (_train_variant(step="after_loop"), "did not change between its reduce_gradients\\(\\) on batch 0"),
    (_train_variant(step="before_reduce"), "did not change"),
    (_train_variant(gather=True), "called unit.gather\\(\\) 16 time"),
    (_train_variant(loss_forward=True), "8 forward passes"),
    (_train_variant(free_first=True), "expected \\['forward', 'backward', 'reduce_gradients', 'free'\\]"),
])
def test_train_check_records_the_loops_calls(train, message) -> None:
    model_fn = SameInit(P.layered_mlp, seed=23, kwargs={"widths": (5, 9, 9, 7, 2)})
    batches = make_batches(4, 12, 5, 2, seed=33)
    args = (train, model_fn, batches, 0.05)
    if message is None:
        l07.check_train_full_shard(*args, world_size=3, batches_per_call=2)
    else:
        with pytest.raises(AssertionError, match=message):
            l07.check_train_full_shard(*args, world_size=3, batches_per_call=2)


def _scaled_losses(model, units, batches, lr):
    return [2 * loss for loss in reference_train(model, units, batches, lr)]


def test_train_check_works_from_the_grader(graded) -> None:
    """The loop runs where the notebook's code is; the stand-in units' records and the losses are decided here."""
    model_fn = SameInit(P.layered_mlp, seed=22, kwargs={"widths": (6, 10, 7, 3)})
    batches = make_batches(4, 8, 6, 3, seed=32)
    l07.check_train_full_shard(graded("train_full_shard", reference_train), model_fn, batches, 0.05, world_size=2,
                                batches_per_call=1)
    with pytest.raises(AssertionError, match="batch 0 returned the loss"):
        l07.check_train_full_shard(graded("train_full_shard", _scaled_losses), model_fn, batches, 0.05,
                                    world_size=2, batches_per_call=1)
