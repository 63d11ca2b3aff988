"""Lesson 05's references and hidden checks (private: never sent into the kernel).

* **references**: the partition rule (:func:`partition`, largest first to the least-loaded
  rank), ``ZeroRedundancyOptimizer``'s own partition read on a gloo group
  (:func:`zero_owners_on_rank`), single-process float64 ``torch.optim.Adam``
  (:func:`adam_reference`) and the ZeRO memory calculator (:mod:`autograder.lessons.costs`);
* hidden **checks** (``check_*``), one per graded cell or case: each runs the student's
  code on cases the visible tests do not show (with the hidden models of
  :mod:`autograder.lessons.l05.drivers`), passes what comes back through
  :func:`autograder.plain.plain` and compares it with a reference, failing with the
  teaching messages of :mod:`helpers.l05_optimizer_state_sharding`.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Mapping, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.plain import number, plain
from helpers import l05_optimizer_state_sharding as lesson
from helpers.runtime.cluster import run
from helpers.shared.models import TinyMLP
from helpers.shared.state import Batch, SameInit, make_batches, mse, state_of, to_float64, uneven_mlp

from ..costs import adam_memory_bytes
from .drivers import IntermittentMLP, idle_mlp

TIMEOUT_S = 20.0  # per distributed call of a hidden test
# Ship this module's functions that reach a rank by value (:func:`zero_owners_on_rank` runs on the
# grader's own ranks): a rank then never imports the autograder package (its nbgrader imports cost
# seconds per rank process). They use only torch and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
Moments = lesson.Moments
State = lesson.State


# --------------------------------------------------------------------------- references


def partition(numels: Sequence[int], world_size: int) -> list[int]:
    """Owner of each parameter: largest first (stable), each to the least-loaded rank, ties to the lowest."""
    load = [0] * world_size
    owners = [0] * len(numels)
    for i in sorted(range(len(numels)), key=lambda i: -numels[i]):
        owners[i] = min(range(world_size), key=lambda r: (load[r], r))
        load[owners[i]] += numels[i]
    return owners


def zero_owners_on_rank(numels: Sequence[int], group: dist.ProcessGroup | None = None) -> list[int]:
    """The group rank ZeroRedundancyOptimizer assigns each parameter to (call inside ``run``).

    Builds throwaway parameters of ``numels`` elements and reads ZeRO's own partition.
    """
    params = [nn.Parameter(torch.zeros(n)) for n in numels]
    zero = lesson.zero_optimizer_class()(params, optimizer_class=torch.optim.SGD, lr=0.1, process_group=group)
    index = {id(p): i for i, p in enumerate(params)}
    owners = [-1] * len(params)
    for rank, groups in enumerate(zero._partition_parameters()):
        for g in groups:
            for p in g["params"]:
                owners[index[id(p)]] = rank
    return owners


def adam_reference(model: nn.Module, batches: Sequence[Batch], hyper: Mapping[str, Any]) -> tuple[State, Moments]:
    """float64 parameters and Adam moments after one ``torch.optim.Adam`` step per full batch.

    Single process, full-batch mean loss, double precision; ``model`` is not modified.
    Parameters with ``requires_grad=False`` get no state. A ``max_norm`` in ``hyper`` (not
    None) clips the full gradient with ``torch.nn.utils.clip_grad_norm_`` before each step.
    """
    adam_hyper = {k: v for k, v in hyper.items() if k != "max_norm"}
    max_norm = hyper.get("max_norm")
    ref = to_float64(model)
    names = {id(p): n for n, p in ref.named_parameters()}
    trainable = [p for p in ref.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, **adam_hyper)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        mse(ref(x.double()), y.double()).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(trainable, max_norm)
        opt.step()
    return state_of(ref), lesson.moments_by_name(opt.state, names)


# --------------------------------------------------------------------------- hidden checks


def _run(fn: Callable[..., Any], *args: Any, world_size: int, **kwargs: Any) -> Any:
    """``run(fn, *args, **kwargs)`` on ``world_size`` ranks, the per-rank results as plain data."""
    return plain(run(fn, *args, world_size=world_size, timeout=TIMEOUT_S, **kwargs), "the per-rank results")


PARTITION_CASES = [
    [6, 6, 6, 6, 6, 6, 6],                      # all ties
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],             # increasing: registration-order greedy is unbalanced
    [100, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 50],     # one giant parameter
    [8, 8, 3, 3, 3, 3, 2, 2, 9, 1, 1, 4, 4],     # mixed ties
    [5, 7],                                      # fewer parameters than ranks
    [60, 10, 10, 10, 60, 6],                     # TinyMLP(6, 10, 6): real layers, ties
]
BIG_PARTITION = [((37 * i) % 50) + 1 for i in range(40)]


def check_partition_on_ranks(partition_fn: Callable[[list[int], int], list[int]], world_size: int) -> None:
    """Every case of :data:`PARTITION_CASES` on ``world_size`` ranks: ZeRO's owners on every rank, balanced.

    ZeRO's owners come from the grader's own ranks, which run no notebook code.
    """
    for numels in PARTITION_CASES:
        zero = _run(zero_owners_on_rank, numels, world_size=world_size)[0]
        ours = _run(lesson.partition_on_rank, partition_fn, numels, world_size=world_size)
        lesson.assert_partition(ours, numels, zero)
        lesson.assert_partition_balanced(ours[0], numels, world_size)


def check_partition_alone(partition_fn: Callable[[list[int], int], list[int]], world_sizes: Sequence[int]) -> None:
    """:data:`BIG_PARTITION` outside any process group, for world sizes no local group has."""
    for world_size in world_sizes:
        owners = plain(partition_fn(list(BIG_PARTITION), world_size), "partition_parameters(...)")
        lesson.assert_partition([owners], BIG_PARTITION, partition(BIG_PARTITION, world_size), world_size)
        lesson.assert_partition_balanced(owners, BIG_PARTITION, world_size)
        again = plain(partition_fn(list(BIG_PARTITION), world_size), "partition_parameters(...)")
        assert again == owners, "the same inputs must give the same owners"


BatchArgs = tuple[int, int, int, int, int]  # make_batches(num_steps, batch_size, in_features, out_features, seed)
WD = dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05)
PLAIN = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
ADAM_CASES: dict[str, tuple[int, SameInit, dict[str, Any], BatchArgs, list[int] | None]] = {
    # case: (world size, model_fn, hyper-parameters, batches, subgroup ranks)
    "3 ranks, frozen layer, weight decay": (3, SameInit(uneven_mlp, seed=13), WD, (4, 12, 5, 3, 17), None),
    "4 ranks": (4, SameInit(TinyMLP, seed=19, kwargs={"in_features": 6, "hidden": 12, "out_features": 5}), PLAIN,
                (3, 16, 6, 5, 23), None),
    "subgroup [1, 2, 3] of 4 ranks": (4, SameInit(uneven_mlp, seed=13), WD, (3, 12, 5, 3, 29), [1, 2, 3]),
    "3 ranks, a layer with a gradient only in steps 2 and 4 of 4, weight decay":
        (3, SameInit(IntermittentMLP, seed=31), WD, (4, 12, 5, 3, 37), None),
}


def assert_step_counts(ours: Moments, expected: Moments, num_steps: int, what: str) -> None:
    """Every parameter in ``ours`` has the step count of ``expected`` (before values are compared)."""
    for name, (_, _, step) in ours.items():
        if name in expected and step != expected[name][2]:
            raise AssertionError(
                f"{what}: {name!r} has Adam step {step:g}, expected {expected[name][2]:g}: it had a gradient in "
                f"{expected[name][2]:g} of the {num_steps} steps. As in torch.optim.Adam, each parameter counts "
                f"only the steps in which its .grad was not None (state[p]['step']), and its bias correction "
                f"uses that count.")


def _partial_hint(expected: Moments, num_steps: int) -> str:
    """A hint naming the parameters that had a gradient in only some of ``num_steps`` steps, or ''."""
    partial = sorted(name for name, (_, _, step) in expected.items() if step < num_steps)
    return (f" Here {partial} had a gradient in only some steps: Adam skips a parameter whose .grad is None and "
            f"corrects its bias with its own step count, not the number of step() calls." if partial else "")


def check_matches_adam(optimizer_cls: type, case: str) -> None:
    """Case ``case`` of :data:`ADAM_CASES` against single-process float64 ``torch.optim.Adam``."""
    world_size, model_fn, hyper, batch_args, ranks = ADAM_CASES[case]
    batches = make_batches(*batch_args)
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, hyper, group_ranks=ranks,
               world_size=world_size)
    outside = [r for r in range(world_size) if ranks is not None and r not in ranks]
    assert all(out[r] is None for r in outside), f"ranks {outside} are outside the group and must return None"
    expected = adam_reference(model_fn(), batches, hyper)
    for rank, r in enumerate(out):
        if r is not None:
            assert_step_counts(r["moments"], expected[1], len(batches), f"{case}, rank {rank}")
    try:
        lesson.assert_sharded_training(out, expected, case)
    except AssertionError as exc:
        raise AssertionError(f"{exc}{_partial_hint(expected[1], len(batches))}") from None


def check_matches_zero(optimizer_cls: type, world_size: int, seed: int, weight_decay: float) -> None:
    """Side by side with ZeroRedundancyOptimizer: an uneven 5-9-3 MLP, 4 steps, other betas."""
    model_fn = SameInit(uneven_mlp, seed=seed, kwargs={"freeze_first": False, "hidden": 9})
    batches = make_batches(4, 4 * world_size, 5, 3, seed=seed + 1)
    hyper = dict(lr=0.03, betas=(0.85, 0.995), eps=1e-8, weight_decay=weight_decay)
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, hyper, with_zero=True,
               world_size=world_size)
    lesson.assert_matches_zero(out, f"{world_size} ranks")


def check_intermittent_matches_zero(optimizer_cls: type, world_size: int) -> None:
    """Side by side with ZeroRedundancyOptimizer: :class:`IntermittentMLP`, whose ``side`` layer has a
    gradient only in steps 2 and 4 (Adam skips it in the other steps and counts its steps apart)."""
    model_fn = SameInit(IntermittentMLP, seed=47)
    batches = make_batches(4, 4 * world_size, 5, 3, seed=53)
    hyper = dict(lr=0.03, betas=(0.85, 0.995), eps=1e-8, weight_decay=0.01)
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, hyper, with_zero=True,
               world_size=world_size)
    what = f"{world_size} ranks, a layer with a gradient only in steps 2 and 4 of 4"
    all_moments = {name: m for r in out for name, m in r["zero"]["moments"].items()}
    for rank, r in enumerate(out):
        assert_step_counts(r["moments"], r["zero"]["moments"], len(batches), f"{what}, rank {rank}")
    try:
        lesson.assert_matches_zero(out, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}.{_partial_hint(all_moments, len(batches))}") from None


STATE_BYTES_CASES: dict[str, tuple[int, SameInit, BatchArgs]] = {
    # case: (world size, model_fn, batches)
    "3 ranks, TinyMLP 7-20-9": (3, SameInit(TinyMLP, seed=62, kwargs={"in_features": 7, "hidden": 20,
                                                                        "out_features": 9}), (2, 6, 7, 9, 64)),
    "4 ranks, TinyMLP 10-24-3": (4, SameInit(TinyMLP, seed=63, kwargs={"in_features": 10, "hidden": 24,
                                                                         "out_features": 3}), (2, 8, 10, 3, 65)),
    # rank 0 owns only side.weight, rank 1 the frozen body.weight and head.bias: no state for the idle ones
    "3 ranks, a frozen and a never-used layer": (3, SameInit(idle_mlp, seed=67), (2, 6, 5, 3, 71)),
}


def check_state_bytes(optimizer_cls: type, case: str) -> None:
    """Case ``case`` of :data:`STATE_BYTES_CASES`: each rank holds and reports 8 bytes per element of the
    parameters it owns (ZeRO's owners) that have Adam state, i.e. that had a gradient in some step."""
    world_size, model_fn, batch_args = STATE_BYTES_CASES[case]
    model = model_fn()
    owners = _run(zero_owners_on_rank, [p.numel() for p in model.parameters()], world_size=world_size)[0]
    batches = make_batches(*batch_args)
    stateful = adam_reference(model, batches, PLAIN)[1]
    holders = [o if name in stateful else -1 for (name, _), o in zip(model.named_parameters(), owners)]
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, PLAIN, world_size=world_size)
    lesson.assert_state_memory(out, holders, case)


def check_in_place(optimizer_cls: type, world_size: int) -> None:
    """An uneven MLP without frozen layers, weight decay 0.01, 3 steps: parameters updated in place."""
    model_fn = SameInit(uneven_mlp, seed=73 + world_size, kwargs={"freeze_first": False})
    batches = make_batches(3, 4 * world_size, 5, 3, seed=79 + world_size)
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, dict(PLAIN, weight_decay=0.01),
               world_size=world_size)
    lesson.assert_in_place(out, f"{world_size} ranks")


def check_consolidated(optimizer_cls: type, world_size: int, group_ranks: list[int] | None) -> None:
    """An uneven MLP with a frozen layer: group rank 0's consolidated dict against float64 Adam."""
    hyper = dict(lr=0.02, betas=(0.8, 0.99), eps=1e-7, weight_decay=0.01)
    model_fn = SameInit(uneven_mlp, seed=97)
    names = [n for n, _ in model_fn().named_parameters()]
    batches = make_batches(3, 12, 5, 3, seed=101 + world_size)
    out = _run(lesson.sharded_train_on_rank, optimizer_cls, model_fn, batches, hyper, group_ranks=group_ranks,
               consolidate=True, world_size=world_size)
    lesson.assert_consolidated(out, names, adam_reference(model_fn(), batches, hyper)[1], hyper)


# --------------------------------------------------------------------------- design exercise: flat shards

CLIPPED = dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05, max_norm=0.3)
FLAT_3 = "3 ranks, uneven MLP 5-8-3 (P = 161, one weight of 80), clipped, weight decay"
FLAT_BIG = "4 ranks, TinyMLP 20-6-3 (P = 159, one weight of 120), clipped"
FLAT_PLAIN = "4 ranks, TinyMLP 6-10-5 (P = 145), no clipping"
FLAT_SUBGROUP = "subgroup [1, 2, 3] of 4 ranks, uneven MLP 5-11-3 (P = 251), clipped"
FLAT_CASES: dict[str, tuple[int, SameInit, dict[str, Any], BatchArgs, list[int] | None]] = {
    # case: (world size, model_fn, hyper-parameters incl. max_norm, batches, subgroup ranks); P not divisible by N
    FLAT_3: (3, SameInit(uneven_mlp, seed=111, kwargs={"freeze_first": False, "hidden": 8}), CLIPPED,
             (4, 12, 5, 3, 113), None),
    FLAT_BIG: (4, SameInit(TinyMLP, seed=117, kwargs={"in_features": 20, "hidden": 6, "out_features": 3}),
               dict(CLIPPED, weight_decay=0.0, max_norm=0.5), (3, 16, 20, 3, 119), None),
    FLAT_PLAIN: (4, SameInit(TinyMLP, seed=123, kwargs={"in_features": 6, "hidden": 10, "out_features": 5}),
                 dict(PLAIN, max_norm=None), (3, 16, 6, 5, 127), None),
    FLAT_SUBGROUP: (4, SameInit(uneven_mlp, seed=131, kwargs={"freeze_first": False, "hidden": 11}), CLIPPED,
                    (3, 12, 5, 3, 137), [1, 2, 3]),
}


def _flat_case(optimizer_cls: type, case: str) -> tuple[list[Any], Any, int, list[int]]:
    """Run ``case`` of :data:`FLAT_CASES`; check the parameters against float64 Adam (+ clip_grad_norm_).

    Returns the per-rank results, the ledger, the number of steps and the group's members.
    """
    world_size, model_fn, hyper, batch_args, ranks = FLAT_CASES[case]
    batches = make_batches(*batch_args)
    out, ledger = run(lesson.flat_train_on_rank, optimizer_cls, model_fn, batches, hyper, group_ranks=ranks,
                      world_size=world_size, timeout=TIMEOUT_S, ledger=True)
    out = plain(out, "the per-rank results")
    members = list(range(world_size)) if ranks is None else list(ranks)
    outside = [r for r in range(world_size) if r not in members]
    assert all(out[r] is None for r in outside), f"ranks {outside} are outside the group and must return None"
    lesson.assert_flat_training([out[r] for r in members], adam_reference(model_fn(), batches, hyper)[0], case)
    return [out[r] for r in members], ledger, len(batches), members


def check_flat_matches_adam(optimizer_cls: type, case: str) -> None:
    """Case ``case`` of :data:`FLAT_CASES`: every rank's parameters equal float64 Adam's (+ clip_grad_norm_)."""
    _flat_case(optimizer_cls, case)


def check_flat_measured(optimizer_cls: type, case: str) -> None:
    """Case ``case``: correct; each rank's optimizer holds at most 8 ceil(P/N) bytes and updated the
    parameters in place; at most N + 2 tensor collectives per training step."""
    out, ledger, num_steps, members = _flat_case(optimizer_cls, case)
    lesson.assert_flat_state_memory(out, case)
    lesson.assert_flat_collectives(ledger, members, num_steps, case)

ZERO1_CASES = [(7_500_000_000, 64, 12), (128_000_000_000, 1024, 12), (1_000_000, 3, 8), (123_457, 7, 16),
               (10, 1, 0), (1_500_000_000, 100, 12), (0, 4, 12)]
GB = 1e9
MIN_WORLD_CASES = [(7_500_000_000, 32 * GB, 12), (7_500_000_000, 120 * GB, 12), (7_500_000_000, 200 * GB, 12),
                   (1000, 4000 + 12000 / 7, 12), (1000, 4000 + 12000 / 7 - 1e-6, 12), (1000, 4000, 0),
                   (1000, 3999, 0), (1_000_000, 4_000_001, 12), (1000, 4000, 12), (1000, 3000, 12),
                   (64_000_000_000, 80 * GB, 12), (1000, 12_000, 8),
                   (1000, 5000, 0), (0, 100, 12)]  # nothing to shard: N = 1 fits (K Psi / spare is 0)


def check_zero1_bytes_per_rank(fn: Callable[[int, int, int], float]) -> None:
    """``fn`` equals the calculator's stage-1 bytes on every case of :data:`ZERO1_CASES`."""
    for psi, n, k in ZERO1_CASES:
        got, want = number(fn(psi, n, k), f"zero1_bytes_per_rank({psi}, {n}, {k})"), adam_memory_bytes(psi, n, 1, k)
        assert math.isclose(got, want, rel_tol=1e-12), f"zero1_bytes_per_rank({psi}, {n}, {k}) = {got}, expected {want}"


def check_min_world_size(fn: Callable[[int, float, int], int | None]) -> None:
    """``fn`` is the smallest fitting N (or None when none fits) on every case of :data:`MIN_WORLD_CASES`."""
    def fits(psi: int, n: int, budget: float, k: int) -> bool:
        return adam_memory_bytes(psi, n, 1, k) <= budget

    for psi, budget, k in MIN_WORLD_CASES:
        call = f"min_world_size({psi}, {budget}, {k})"
        got = plain(fn(psi, budget, k), call)
        if not any(fits(psi, n, budget, k) for n in (1, 10 ** 12)):
            assert got is None, f"{call} = {got}, but no world size fits"
            continue
        assert type(got) is int and got >= 1, f"{call} = {got!r}: expected an int >= 1"
        assert fits(psi, got, budget, k), f"{call} = {got} does not fit the budget"
        assert got == 1 or not fits(psi, got - 1, budget, k), f"{call} = {got}: {got - 1} fits too"
