"""Lesson 05, optimizer-state sharding: the instructor side.

* **references**: the partition rule (:func:`partition`, largest first to the least-loaded
  rank), ``ZeroRedundancyOptimizer``'s own partition read on a gloo group
  (:func:`zero_owners_on_rank`), single-process float64 ``torch.optim.Adam``
  (:func:`adam_reference`) and the ZeRO memory calculator (:mod:`autograder.lessons.costs`);
* hidden **checks** (``check_*``), one per graded cell or case: each runs the student's
  code on cases the visible tests do not show, passes what comes back through
  :func:`autograder.plain.plain` and compares it with a reference, failing with the
  teaching messages of :mod:`helpers.l05_optimizer_state_sharding`;
* :data:`STORED`: what chapter 05, its explorer and the visible tests read from
  ``helpers/stored``. Units: bytes, sizes in elements; 1 GB = 1e9 B as in the ZeRO paper.
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable, Mapping, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.store import FLOAT32_RESULTS
from autograder.plain import number, plain
from helpers import l05_optimizer_state_sharding as lesson
from helpers.runtime.cluster import run
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyLM, TinyMLP
from helpers.shared.state import (
    Batch, SameInit, frozen_first, make_batches, mse, state_of, to_float64, uneven_mlp)

from .costs import adam_memory_bytes, ring_allreduce_bytes, ring_broadcast_bytes, zero_memory_parts

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "IntermittentMLP",
    "idle_mlp",
})

TIMEOUT_S = 20.0  # per distributed call of a hidden test
# Ship this module's rank-side drivers by value: a rank then never imports the autograder
# package (its nbgrader imports cost seconds per rank process). The drivers use only torch
# and helpers.
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


class IntermittentMLP(nn.Module):
    """A 5-8-3 MLP whose ``side`` layer takes part only in the forward calls numbered in ``uses``.

    Calls are counted from 0 per model; one forward per training step makes ``side`` get a
    gradient in some steps and ``None`` in the others, the same on every rank, so its Adam
    step count differs from the number of optimizer steps.
    """

    def __init__(self, uses: Sequence[int] = (1, 3)) -> None:
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.side = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.uses, self.calls = tuple(uses), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.body(x))
        if self.calls in self.uses:
            h = h + torch.tanh(self.side(h))
        self.calls += 1
        return self.head(h)


def idle_mlp() -> nn.Module:
    """:class:`IntermittentMLP` whose ``side`` layer is never used and whose first weight is frozen:
    three parameters (``body.weight``, ``side.weight``, ``side.bias``) that never have a gradient."""
    return frozen_first(IntermittentMLP(uses=()))


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


# --------------------------------------------------------------------------- stored results

PAPER = dict(num_params=7_500_000_000, world_size=64, k=12)  # ZeRO paper, Figure 1
BUDGET_BYTES = 32 * GB
MEMORY_WORLD_SIZES = [2 ** e for e in range(11)]
EXPLORER_PARAMS = [1_300_000_000, 7_500_000_000, 13_000_000_000, 70_000_000_000, 128_000_000_000,
                   175_000_000_000, 1_000_000_000_000]
EXPLORER_K = [8, 12, 16]


def zero_memory_results() -> dict[str, Any]:
    """Chapter 05's memory numbers (bytes per rank): the paper's Figure 1, the stage curves, a 32 GB budget."""
    psi, k = PAPER["num_params"], PAPER["k"]
    first_fit = {str(s): next((n for n in range(1, 4097) if adam_memory_bytes(psi, n, s, k) <= BUDGET_BYTES), None)
                 for s in range(4)}
    return {
        "paper_figure_1": dict(PAPER, bytes_per_rank=[adam_memory_bytes(psi, PAPER["world_size"], s, k)
                                                      for s in range(4)]),
        "curves": {"num_params": psi, "k": k, "world_sizes": MEMORY_WORLD_SIZES, "stage1_floor": 4 * psi,
                   "bytes_per_rank": {str(s): [adam_memory_bytes(psi, n, s, k) for n in MEMORY_WORLD_SIZES]
                                      for s in range(4)}},
        "budget": {"bytes": BUDGET_BYTES, "searched_up_to": 4096, "first_fitting_world_size": first_fit},
    }


def memory_explorer_grid() -> dict[str, Any]:
    """``parts[psi][k][i][stage]`` = (parameter, gradient, optimizer-state) bytes per rank at world size ``i``."""
    return {
        "num_params": EXPLORER_PARAMS, "k": EXPLORER_K, "world_sizes": MEMORY_WORLD_SIZES,
        "stage1_floor": {str(psi): 4 * psi for psi in EXPLORER_PARAMS},
        "parts": {str(psi): {str(k): [[list(zero_memory_parts(psi, n, s, k)) for s in range(4)]
                                      for n in MEMORY_WORLD_SIZES] for k in EXPLORER_K} for psi in EXPLORER_PARAMS},
    }


def tinylm_communication() -> dict[str, Any]:
    """Ring bytes per rank of one fp32 broadcast and one all-reduce of every TinyLM parameter, N = 1..4."""
    with torch.device("meta"):  # only the sizes: no memory, no draw from the global RNG
        num_params = sum(p.numel() for p in TinyLM().parameters())  # the tied embedding/head counts once
    world_sizes = [1, 2, 3, 4]
    return {"num_params": num_params, "world_sizes": world_sizes,
            "broadcast": [ring_broadcast_bytes(num_params, 4, n) for n in world_sizes],
            "all_reduce": [ring_allreduce_bytes(num_params, 4, n) for n in world_sizes]}


VISIBLE_ADAM = {  # visible test: (model_fn, batches, hyper-parameters); its expected values are stored
    "test_sharded_adam_matches_adam": (SameInit(TinyMLP, seed=5), (3, 12, 8, 4, 7), PLAIN),
    "test_consolidated_state_dict": (SameInit(TinyMLP, seed=83), (2, 12, 8, 4, 89), PLAIN),
    "test_flat_adam_matches_adam": (SameInit(TinyMLP, seed=139), (3, 12, 8, 4, 149),
                                    dict(PLAIN, weight_decay=0.01, max_norm=0.4)),
}


def visible_references() -> dict[str, Any]:
    """float64 single-process Adam after the visible tests' steps: parameters, moments, steps."""
    out = {}
    for case, (model_fn, batch_args, hyper) in VISIBLE_ADAM.items():
        params, moments = adam_reference(model_fn(), make_batches(*batch_args), hyper)
        out[case] = {"params": tensors_to_json(params),
                     "moments": tensors_to_json({f"{n}.{key}": t for n, (m, v, _) in moments.items()
                                                 for key, t in (("exp_avg", m), ("exp_avg_sq", v))}),
                     "steps": {n: step for n, (_, _, step) in moments.items()}}
    return out


STORED_ROUNDING = {lesson.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {
    lesson.STORED_MEMORY: zero_memory_results,
    lesson.STORED_EXPLORER: memory_explorer_grid,
    lesson.STORED_REFERENCES: visible_references,
    "05_tinylm_communication": tinylm_communication,
}
