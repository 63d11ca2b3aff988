"""Lesson 01, replicated training: references and hidden checks (the grader's side only).

* **references**: float64 single-process :func:`full_batch_gradients` and :func:`sgd_reference`
  (what equal-shard replicated training must compute) and real ``DistributedDataParallel``
  (:func:`real_ddp`), trained on the grader's own ranks, which run no notebook code;
* hidden **checks** (``check_*``), one per graded cell: each runs the student's function (or, for
  the design exercise, constructs and trains with the student's ``ReplicatedModel``) through a driver
  of :mod:`.drivers` on cases the visible tests do not show, passes what comes back through
  :func:`autograder.plain.plain` and compares it with a reference, or reads the communication ledger
  the cluster measured, failing with the same teaching messages as the visible checks
  (:mod:`helpers.shared.checks`).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from autograder.plain import number, plain
from helpers.shared import checks
from helpers.runtime.cluster import CollectiveMismatch, CollectiveTimeout, run
from helpers.runtime.ledger import COLLECTIVES, Ledger
from helpers.shared.models import BatchNormMLP, make_regression_batch, shard_batch
from helpers.shared.state import (
    Batch, PerRankInit, SameInit, State, make_batches, mean_of, mse, state_of, to_float64, uneven_mlp)
from helpers import l01_replicated_training as lesson
from helpers.l01_replicated_training import Perturb, aligned_on_rank, average_on_rank, broadcast_on_rank, wrap_on_rank

from ..costs import ring_allreduce_bytes
from .drivers import (
    ScratchBufferMLP, UnusedHead, WarmBatchNormMLP, aligned_in_subgroup_on_rank, aligned_scratch_on_rank,
    average_in_subgroup_on_rank, average_synthetic_on_rank, broadcast_all_buffers_on_rank,
    broadcast_in_subgroup_on_rank, frozen_batchnorm_mlp, train_wrapped_on_rank, wrap_in_subgroup_on_rank,
    wrapped_grads_on_rank)

TIMEOUT_S = 20.0  # per distributed call of a hidden test
# Ship this module by value too: real DDP (:func:`real_ddp`) runs on the grader's own ranks, which then
# never import the autograder package.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- references


def full_batch_gradients(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor | None]:
    """float64 gradient of the full-batch mean loss for every parameter, ``None`` where backward
    gives none (frozen or unused).

    ``model`` is not modified. This is what averaged per-rank mean-loss gradients must equal
    when every rank holds the same number of rows.
    """
    ref = to_float64(model)
    ref.zero_grad(set_to_none=True)
    mse(ref(x.double()), y.double()).backward()
    return {n: None if p.grad is None else p.grad.detach().clone() for n, p in ref.named_parameters()}


def sgd_reference(model: nn.Module, batches: Sequence[Batch], lr: float) -> State:
    """float64 parameters and buffers after one plain SGD step per full batch.

    Single process, full batch, double precision: the state that replicated training with
    equal shards and correctly averaged gradients approximates. ``model`` is not modified.
    """
    ref = to_float64(model)
    opt = torch.optim.SGD([p for p in ref.parameters() if p.requires_grad], lr=lr)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        mse(ref(x.double()), y.double()).backward()
        opt.step()
    return state_of(ref)


def real_ddp(module: nn.Module, group: dist.ProcessGroup | None = None) -> nn.Module:
    """PyTorch's ``DistributedDataParallel`` with the design exercise's interface (``cls(module, group=group)``).

    ``find_unused_parameters=True``: the hidden models have a trainable head that forward never
    uses, whose ``.grad`` DDP then leaves at ``None``. Run it on the grader's own ranks only.
    """
    return DistributedDataParallel(module, process_group=group, find_unused_parameters=True)


# --------------------------------------------------------------------------- hidden checks


def _run(fn: Callable[..., Any], *args: Any, world_size: int) -> Any:
    """``run(fn, *args)`` on ``world_size`` ranks, the per-rank results as plain data."""
    return plain(run(fn, *args, world_size=world_size, timeout=TIMEOUT_S), "the per-rank results")


def run_in_subgroup(fn: Callable[..., Any], *args: Any, ranks: Sequence[int], what: str) -> Any:
    """``fn(*args)`` on 4 ranks as plain data, for a driver built on :func:`in_subgroup`; a rank
    outside ``ranks`` that was drawn into a collective fails with a message saying so."""
    try:
        return _run(fn, *args, world_size=4)
    except (CollectiveMismatch, CollectiveTimeout) as exc:
        outside = [r for r in range(4) if r not in ranks]
        first = str(exc).splitlines()[0]
        raise AssertionError(
            f"{what} with group = dist.new_group({list(ranks)}) of 4 ranks: only ranks {list(ranks)} call it, and "
            f"ranks {outside} never do. Issue every collective on `group` (group=group); a collective on the "
            f"default group waits for ranks that are not in the group. The cluster reported: {first}") from None


def check_average_synthetic(average_fn: Callable[..., None], world_size: int, seed: int) -> None:
    """Unequal shapes, a frozen first layer (grad None), rank-dependent synthetic gradients."""
    model_fn = SameInit(uneven_mlp, seed=3)
    out = _run(average_synthetic_on_rank, average_fn, model_fn, seed, world_size=world_size)
    before = [b for b, _ in out]
    lesson.assert_gradients_averaged([a for _, a in out], mean_of(before), world_size, local_per_rank=before)


def check_average_full_batch(average_fn: Callable[..., None], world_size: int, seed: int) -> None:
    """Real shard gradients of a 6-10-2 TinyMLP against the float64 full-batch gradient; the model's
    unused trainable head (:class:`UnusedHead`) must keep ``grad=None``."""
    model_fn = SameInit(UnusedHead, seed=seed, kwargs={"in_features": 6, "hidden": 10, "out_features": 2})
    x, y = make_regression_batch(4 * world_size, in_features=6, out_features=2, seed=seed + 10)
    out = _run(average_on_rank, average_fn, model_fn, x, y, world_size=world_size)
    lesson.assert_gradients_averaged([a for _, a in out], full_batch_gradients(model_fn(), x, y), world_size,
                                     local_per_rank=[b for b, _ in out])


def check_average_in_subgroup(average_fn: Callable[..., None], ranks: Sequence[int], seed: int) -> None:
    """4 ranks, members of ``new_group(ranks)`` average synthetic gradients; the others keep theirs."""
    model_fn = SameInit(uneven_mlp, seed=3)
    out = run_in_subgroup(average_in_subgroup_on_rank, average_fn, model_fn, list(ranks), seed, ranks=ranks,
                           what="average_gradients(model, group)")
    members = [out[r] for r in ranks]
    lesson.assert_gradients_averaged([a for _, a in members], mean_of([b for b, _ in members]), len(ranks),
                                     local_per_rank=[b for b, _ in members])
    for rank in set(range(4)) - set(ranks):
        before, after = out[rank]
        assert all((b is None and a is None) or (b is not None and a is not None and torch.equal(a, b))
                   for b, a in zip(before.values(), after.values())), (
            f"rank {rank} is not in the group {list(ranks)} and did not call average_gradients, "
            "yet its gradients changed")


def check_broadcast(broadcast_fn: Callable[..., None], world_size: int, src: int, seed: int) -> None:
    """BatchNormMLP replicas whose running stats, ``num_batches_tracked`` and frozen first weight differ per rank."""
    model_fn = PerRankInit(frozen_batchnorm_mlp, seed=seed)
    lesson.assert_broadcast_from(_run(broadcast_on_rank, broadcast_fn, model_fn, src, 6, world_size=world_size), src)


def check_broadcast_in_subgroup(broadcast_fn: Callable[..., None], ranks: Sequence[int], src: int) -> None:
    """A subgroup ``ranks`` of 4 ranks with global ``src``: members get src's state, the rest keep theirs."""
    model_fn = PerRankInit(BatchNormMLP, seed=70)
    out = _run(broadcast_in_subgroup_on_rank, broadcast_fn, model_fn, list(ranks), src, 6, world_size=4)
    for rank in range(4):
        expected, what = ((out[src][0], f"group {list(ranks)}, src={src}: rank {rank} after vs rank {src} before")
                          if rank in ranks
                          else (out[rank][0], f"rank {rank} is not in the group and must be unchanged"))
        lesson.assert_states_close(out[rank][1], expected, 0.0, 0.0, what=what)


def check_broadcast_all_buffers(broadcast_fn: Callable[..., None], world_size: int, src: int) -> None:
    """:class:`ScratchBufferMLP` replicas: every rank ends with rank ``src``'s non-persistent buffer too."""
    out = _run(broadcast_all_buffers_on_rank, broadcast_fn, PerRankInit(ScratchBufferMLP, seed=65), src,
               world_size=world_size)
    for rank, (_, after) in enumerate(out):
        lesson.assert_states_close(
            after, out[src][0], 0.0, 0.0,
            what=f"broadcast_parameters(model, src={src}): rank {rank}'s buffers after the call vs rank {src}'s "
                 f"(every buffer of model.buffers(), also one registered with persistent=False, which "
                 f"state_dict() leaves out)")


ALIGNED_CASES: list[tuple[int, str, list[Perturb], bool]] = [
    (3, "BatchNorm replicas, identical", [], True),
    (3, "rank 2 swaps two elements of fc2.weight", [Perturb(2, "fc2.weight", "swap")], False),
    (3, "rank 2: one ulp in bn.running_var", [Perturb(2, "bn.running_var", "ulp", index=3)], False),
    (4, "rank 3: num_batches_tracked + 1", [Perturb(3, "bn.num_batches_tracked", "add_one")], False),
    (4, "rank 1: one ulp in bn.running_mean", [Perturb(1, "bn.running_mean", "ulp", index=7)], False),
    (4, "BatchNorm replicas, identical", [], True),
]


def check_replicas_aligned(aligned_fn: Callable[..., bool]) -> None:
    """Every case of :data:`ALIGNED_CASES` (BatchNorm buffers warmed identically, then perturbed)."""
    model_fn = SameInit(BatchNormMLP, seed=90)
    for world_size, case, perturbations, expected in ALIGNED_CASES:
        out = _run(aligned_on_rank, aligned_fn, model_fn, perturbations, 6, world_size=world_size)
        lesson.assert_all_ranks_return([r for r, _ in out], expected, f"{world_size} ranks, {case}")
        assert all(untouched for _, untouched in out), f"[{case}] replicas_aligned modified the model"


def check_replicas_aligned_all_buffers(aligned_fn: Callable[..., bool]) -> None:
    """3 ranks, :class:`ScratchBufferMLP` replicas differing only in the non-persistent buffer on rank 1."""
    out = _run(aligned_scratch_on_rank, aligned_fn, SameInit(ScratchBufferMLP, seed=92), 1, world_size=3)
    lesson.assert_all_ranks_return(out, False, "3 ranks, rank 1: one element of a buffer registered with "
                                               "persistent=False (model.buffers() lists it, state_dict() does not)")


ALIGNED_SUBGROUP_CASES: list[tuple[list[int], str, list[Perturb], bool]] = [
    ([1, 3], "identical replicas", [], True),
    ([1, 3], "rank 3 swaps two elements of fc1.weight", [Perturb(3, "fc1.weight", "swap")], False),
    ([0, 2, 3], "rank 2: one ulp in bn.running_mean", [Perturb(2, "bn.running_mean", "ulp", index=4)], False),
]


def check_replicas_aligned_in_subgroup(aligned_fn: Callable[..., bool]) -> None:
    """Every case of :data:`ALIGNED_SUBGROUP_CASES`: 4 ranks, only the members call ``aligned_fn(model, group)``."""
    model_fn = SameInit(BatchNormMLP, seed=91)
    for ranks, case, perturbations, expected in ALIGNED_SUBGROUP_CASES:
        what = f"replicas_aligned(model, group), {case}"
        out = run_in_subgroup(aligned_in_subgroup_on_rank, aligned_fn, model_fn, ranks, perturbations, 6,
                               ranks=ranks, what=what)
        case = f"group {ranks} of 4 ranks, {case}"
        lesson.assert_all_ranks_return([out[r][0] for r in ranks], expected, case)
        assert all(out[r][1] for r in ranks), f"[{case}] replicas_aligned modified the model"


WRAPPER = "ReplicatedModel"  # the design exercise's class, as messages name it


def _members(world_size: int, ranks: Sequence[int] | None) -> list[int]:
    return list(range(world_size)) if ranks is None else list(ranks)


def _case(world_size: int, ranks: Sequence[int] | None) -> str:
    return f"{world_size} ranks" if ranks is None else f"group {list(ranks)} of {world_size} ranks"


def _sync_hint(o: dict[str, Any], out: Sequence[dict[str, Any]], first: int) -> str:
    """Why a member's module after construction is not the group's first rank's, if a pattern says so."""
    if checks.first_difference(o["after"], o["before"]) is None:
        return " Its module did not change at all."
    if first != 0 and checks.first_difference(o["after"], out[0]["before"]) is None:
        return (f" It now holds global rank 0's values; the group's first rank is global rank {first} "
                f"(dist.get_global_rank(group, 0)).")
    return (" Every parameter (frozen ones too) and every buffer of module.buffers() (integer counters and "
            "buffers registered with persistent=False, which state_dict() leaves out, too) must be the first "
            "rank's.")


def assert_constructed_from(out: Sequence[dict[str, Any]], first: int, members: Sequence[int], case: str) -> None:
    """Per-rank :func:`sync_probe_on_rank` results: after construction every member holds global rank ``first``'s
    pre-construction parameters and buffers, bit for bit and in its own tensors; the other ranks are unchanged."""
    for rank, o in enumerate(out):
        if rank not in members:
            diff = checks.first_difference(o["after"], o["before"])
            assert diff is None, (f"[{case}] rank {rank} is not in the group and never constructs a {WRAPPER}, "
                                  f"yet its module changed: {diff}")
            continue
        lesson.assert_parameter_identity(o["ids_before"], o["ids_after"], o["optimizer_moved"])
        diff = checks.first_difference(o["after"], out[first]["before"])
        if diff is not None:
            raise AssertionError(
                f"[{case}] when {WRAPPER}(module) returns, rank {rank}'s module should hold rank {first}'s "
                f"parameters and buffers as they were before, bit for bit, but {diff}.{_sync_hint(o, out, first)}")


def check_replicated_construction(wrapper_cls: Callable[..., nn.Module]) -> None:
    """:class:`WarmBatchNormMLP` replicas that differ in every tensor: on 3 ranks, and on the group [1, 3] of 4."""
    model_fn = PerRankInit(WarmBatchNormMLP, seed=120)
    assert_constructed_from(_run(wrap_on_rank, wrapper_cls, model_fn, 6, world_size=3), 0, range(3),
                            _case(3, None))
    ranks = [1, 3]
    out = run_in_subgroup(wrap_in_subgroup_on_rank, wrapper_cls, model_fn, ranks, 6, ranks=ranks,
                          what=f"{WRAPPER}(module, group)")
    assert_constructed_from(out, ranks[0], ranks, _case(4, ranks))


GRADIENT_CASES: list[tuple[int, list[int] | None, PerRankInit, int, int]] = [
    # world size, group ranks (None: the default group), model_fn, in and out features
    (3, None, PerRankInit(WarmBatchNormMLP, seed=130), 6, 3),
    (4, [1, 2, 3], PerRankInit(UnusedHead, seed=140, kwargs={"in_features": 5, "hidden": 7, "out_features": 2}),
     5, 2),
]


def check_replicated_gradients(wrapper_cls: Callable[..., nn.Module]) -> None:
    """Every case of :data:`GRADIENT_CASES`: after one backward, every member's gradients are the mean of the
    float64 gradients of the members' shards, taken from the first member's initial model; ``None`` stays ``None``."""
    for world_size, ranks, model_fn, n_in, n_out in GRADIENT_CASES:
        members, case = _members(world_size, ranks), _case(world_size, ranks)
        x, y = make_regression_batch(4 * len(members), in_features=n_in, out_features=n_out, seed=7 * world_size)
        out = _run(wrapped_grads_on_rank, wrapper_cls, model_fn, x, y, ranks, world_size=world_size)
        init = model_fn.for_rank(members[0])
        local = [full_batch_gradients(init, *shard_batch(x, y, i, len(members))) for i in range(len(members))]
        got = [out[r] for r in members]
        trained = [n for n, g in local[0].items() if g is not None]
        if all(checks.first_difference({n: g[n] for n in trained}, {n: loc[n] for n in trained}, 1e-6, 1e-4) is None
               for g, loc in zip(got, local)):
            raise AssertionError(
                f"[{case}] after loss.backward() every rank still holds the gradient of its own shard. The test "
                f"calls nothing between backward() and reading .grad: {WRAPPER} must have averaged the gradients "
                f"over the group by the time backward() returns.")
        try:
            lesson.assert_gradients_averaged(got, mean_of(local), len(members))
        except AssertionError as exc:
            raise AssertionError(f"[{case}, ranks numbered within the group] {exc}") from None


TRAIN_CASES: list[tuple[int, list[int] | None, PerRankInit, int, int, float, float]] = [
    # world size, group ranks (None: the default group), model_fn, in and out features, lr, momentum
    (3, None, PerRankInit(WarmBatchNormMLP, seed=150), 6, 3, 0.2, 0.9),
    (4, [1, 2, 3], PerRankInit(WarmBatchNormMLP, seed=160, kwargs={"in_features": 5, "hidden": 8,
                                                                  "out_features": 2}), 5, 2, 0.1, 0.0),
    (4, None, PerRankInit(UnusedHead, seed=170, kwargs={"in_features": 5, "hidden": 9, "out_features": 3}),
     5, 3, 0.3, 0.0),
]
TRAIN_STEPS = 4


def assert_like_ddp(got: Sequence[State | None], ddp: Sequence[State | None], members: Sequence[int],
                    buffers: set[str], case: str) -> None:
    """Every member's module after training equals real DDP's on the same rank (parameters and ``buffers``)."""
    for rank in members:
        diff = checks.first_difference(got[rank], ddp[rank], atol=1e-6, rtol=1e-5)
        if diff is None:
            continue
        differing = {n for n in ddp[rank] if checks.first_difference({n: got[rank][n]}, {n: ddp[rank][n]},
                                                                      atol=1e-6, rtol=1e-5) is not None}
        hint = (" Only buffers differ: with broadcast_buffers=True, each forward starts from the group's first "
                "rank's buffers, and BatchNorm then updates each rank's from its own rows."
                if differing <= buffers else
                " Check the construction and gradient parts of the contract (the tests above).")
        raise AssertionError(
            f"[{case}] after {TRAIN_STEPS} SGD steps through {WRAPPER}, rank {rank}'s module differs from "
            f"real DistributedDataParallel's rank {rank}: {diff}.{hint}")


# Collectives whose recorded elements are data combined across ranks (not copied from one rank).
COMBINING = frozenset(op for op, (_, full, _) in COLLECTIVES.items() if full is not None and op not in
                      ("broadcast", "scatter"))


def assert_combines_gradients(ledger: Ledger, members: Sequence[int], elements: int, case: str) -> None:
    """Every member's recorded combining collectives carried at least ``TRAIN_STEPS * elements`` elements."""
    for rank in members:
        carried = sum(r.numel for r in ledger.records[rank] if r.op in COMBINING)
        assert carried >= TRAIN_STEPS * elements, (
            f"[{case}] in {TRAIN_STEPS} steps rank {rank}'s torch.distributed collectives combined {carried} "
            f"elements across ranks, fewer than the {TRAIN_STEPS} x {elements} gradient elements the steps produce. "
            f"Average with torch.distributed collectives on the group (the course's ledger records them); a "
            f"wrapped DistributedDataParallel, whose reducer runs in C++ where the ledger cannot see it, is not "
            f"your design.")


def check_replicated_training(wrapper_cls: Callable[..., nn.Module]) -> None:
    """Every case of :data:`TRAIN_CASES`: the gradients go through recorded collectives, and each rank ends
    equal to real DDP trained on the grader's own ranks and, where the model has no BatchNorm and SGD no
    momentum, to float64 full-batch SGD."""
    for world_size, ranks, model_fn, n_in, n_out, lr, momentum in TRAIN_CASES:
        members, case = _members(world_size, ranks), _case(world_size, ranks)
        batches = make_batches(num_steps=TRAIN_STEPS, batch_size=4 * len(members), in_features=n_in,
                               out_features=n_out, seed=600 + world_size)
        got, ledger = run(train_wrapped_on_rank, wrapper_cls, model_fn, batches, lr, momentum, ranks,
                          world_size=world_size, timeout=TIMEOUT_S, ledger=True)
        got = plain(got, "the per-rank results")
        init = model_fn.for_rank(members[0])
        elements = sum(g.numel() for g in full_batch_gradients(init, *batches[0]).values() if g is not None)
        assert_combines_gradients(ledger, members, elements, case)
        if model_fn.factory is UnusedHead and momentum == 0.0:
            checks.assert_training_matches([got[r] for r in members], state_of(init), sgd_reference(init, batches, lr),
                                           len(members), reference=f"single-process full-batch SGD (float64), {case}")
        ddp = _run(train_wrapped_on_rank, real_ddp, model_fn, batches, lr, momentum, ranks, world_size=world_size)
        assert_like_ddp(got, ddp, members, {n for n, _ in model_fn.for_rank(0).named_buffers()}, case)


RING_CASES = [(123_457, 4, 3), (7, 8, 5), (0, 4, 8), (1, 1, 7), (25_000_000, 2, 64), (4096, 4, 1), (10, 4, 2)]


def check_ring_allreduce_bytes(fn: Callable[[int, int, int], float]) -> None:
    """``fn`` against the calculator on every case of :data:`RING_CASES`."""
    def as_number(n: int, b: int, w: int) -> float:
        return number(fn(n, b, w), f"ring_allreduce_bytes({n}, {b}, {w})")

    lesson.assert_ring_allreduce_bytes(as_number, {case: ring_allreduce_bytes(*case) for case in RING_CASES})
