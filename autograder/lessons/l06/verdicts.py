"""Lesson 06's references and hidden checks (private: never sent into the kernel).

References of the graded functions (the owner layout and the reduce-scattered slices) and the
hidden checks (every student value passes :func:`autograder.plain.plain` first; the
comparisons and their teaching messages are :mod:`helpers.l06_gradient_sharding`'s).

Layout: a flat gradient of ``numel`` elements is padded with zeros to ``N * S`` elements,
``S = ceil(numel / N)``; group rank ``r`` owns elements ``[r*S, (r+1)*S)`` of the padded vector.
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch

from autograder.lessons.costs import adam_memory_bytes
from autograder.plain import plain
from helpers import l06_gradient_sharding as grad_sharding
from helpers.runtime.cluster import run
from helpers.shared.models import TinyMLP
from helpers.shared.state import SameInit, make_batches, uneven_mlp

# Functions of this module that reach a rank (tests pass the references to drivers) travel by
# value: a rank then never imports the autograder package and its nbgrader imports.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

# --------------------------------------------------------------------------- references


def shard_size(numel: int, world_size: int) -> int:
    """Elements per owner slice, ``S = ceil(numel / world_size)`` (padding included)."""
    if numel < 0 or world_size < 1:
        raise ValueError("numel must be >= 0 and world_size >= 1")
    return -(-numel // world_size)


def owned_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)``: the real (unpadded) elements rank ``rank`` owns; may be empty."""
    s = shard_size(numel, world_size)
    return min(rank * s, numel), min((rank + 1) * s, numel)


def expected_owned_slices(per_rank: Sequence[torch.Tensor], denominator: float | None = None) -> list[torch.Tensor]:
    """float64 owner slices (index = group rank) of ``sum_r per_rank[r] / denominator``.

    ``denominator`` defaults to the number of ranks. Each slice has ``S`` elements; the
    padding positions are 0.
    """
    n = len(per_rank)
    total = torch.stack([g.double() for g in per_rank]).sum(0)
    padded = torch.cat([total, total.new_zeros(n * shard_size(total.numel(), n) - total.numel())])
    return list((padded / (n if denominator is None else denominator)).chunk(n))


# --------------------------------------------------------------------------- hidden checks


def _plain_fn(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``fn`` whose return value is passed through :func:`plain` before a check sees it."""
    return lambda *args: plain(fn(*args), f"{name}{args}")


def check_owned_ranges(fn: Callable[[int, int, int], Any], cases: Sequence[tuple[int, int]]) -> None:
    """``fn(numel, N, rank)`` equals :func:`owned_range` for every rank of every case ``(numel, N)``."""
    grad_sharding.assert_owned_ranges(_plain_fn(fn, "owned_range"),
                                      [(numel, n, [owned_range(numel, n, r) for r in range(n)]) for numel, n in cases])


def check_reduce_scattered(results: Sequence[Any], ledger: Any, numel: int, seed: int,
                            denominator: float | None = None, dtype: torch.dtype = torch.float32,
                            group_ranks: Sequence[int] | None = None) -> None:
    """The members' slices are the reference slices of the synthetic gradients; one reduce-scatter each."""
    n = len(group_ranks) if group_ranks is not None else len(results)
    expected = expected_owned_slices([grad_sharding.synthetic_flat_grad(numel, g, seed) for g in range(n)],
                                     denominator)
    grad_sharding.assert_reduce_scattered(plain(results, "the returned slices"), ledger, numel, expected,
                                          denominator, dtype, group_ranks)


def check_clipped(results: Sequence[Any], ledger: Any, shards_per_rank: Sequence[Sequence[torch.Tensor]],
                   max_norm: float, group_ranks: Sequence[int] | None = None) -> None:
    """Norm and clipped shards equal ``clip_grad_norm_`` on the full gradient; one scalar all-reduce each."""
    grad_sharding.assert_clipped(plain(results, "the returned norm and shards"), shards_per_rank, max_norm,
                                 group_ranks)
    members = list(group_ranks) if group_ranks is not None else list(range(len(results)))
    grad_sharding.assert_one_scalar_all_reduce(ledger, members)


def check_matches_replicated(results: Sequence[Any], numel: int) -> None:
    """The sharded step's owned, clipped slice equals the replicated run's, at the reference ranges."""
    n = len(results)
    grad_sharding.assert_matches_replicated(plain(results, "the sharded step's results"),
                                            [owned_range(numel, n, r) for r in range(n)])


# --------------------------------------------------------------------------- design exercise 6: Zero2Optimizer

TIMEOUT_S = 30.0  # per distributed call of a hidden test
ADAM = ("adam", {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.05})
MOMENTUM = ("sgd", {"lr": 0.05, "momentum": 0.9})
SGD = ("sgd", {"lr": 0.1})
Z_UNEVEN = "3 ranks, uneven MLP 5-8-3 (P = 161, one weight of 80), Adam, max_norm 0.3 (clips some steps)"
Z_BIG = "4 ranks, TinyMLP 20-6-3 (P = 159, one weight of 120), SGD with momentum, max_norm 0.5 (clips every step)"
Z_SUBGROUP = "subgroup [1, 2, 3] of 4 ranks, uneven MLP 5-11-3 (P = 251, one weight of 143), Adam, no clipping"
Z_PLAIN = "4 ranks, TinyMLP 6-10-5 (P = 145, one weight of 60), SGD, max_norm 1000 (never reached)"
ZERO2_CASES: dict[str, tuple[int, SameInit, grad_sharding.OptimizerSpec, float | None, tuple[int, ...],
                             list[int] | None]] = {
    # case: (world size, model_fn, optimizer spec, max_norm, make_batches arguments, subgroup ranks)
    Z_UNEVEN: (3, SameInit(uneven_mlp, seed=111, kwargs={"freeze_first": False, "hidden": 8}), ADAM, 0.3,
               (4, 12, 5, 3, 113), None),
    Z_BIG: (4, SameInit(TinyMLP, seed=117, kwargs={"in_features": 20, "hidden": 6, "out_features": 3}), MOMENTUM,
            0.5, (3, 16, 20, 3, 119), None),
    Z_SUBGROUP: (4, SameInit(uneven_mlp, seed=131, kwargs={"freeze_first": False, "hidden": 11}), ADAM, None,
                 (3, 12, 5, 3, 137), [1, 2, 3]),
    Z_PLAIN: (4, SameInit(TinyMLP, seed=123, kwargs={"in_features": 6, "hidden": 10, "out_features": 5}), SGD,
              1e3, (3, 16, 6, 5, 127), None),
}


def _zero2_case(optimizer_cls: Any, case: str) -> tuple[list[Any], Any, list[int], int]:
    """Run ``case`` of :data:`ZERO2_CASES`; check the parameters after every step against float64 replicated
    training computed here. Returns the members' results, the ledger, the members and the number of steps."""
    world_size, model_fn, spec, max_norm, batch_args, ranks = ZERO2_CASES[case]
    batches = make_batches(*batch_args)
    out, ledger = run(grad_sharding.zero2_train_on_rank, optimizer_cls, model_fn, batches, spec, max_norm, ranks,
                      world_size=world_size, timeout=TIMEOUT_S, ledger=True)
    out = plain(out, "the per-rank results")
    members = list(range(world_size)) if ranks is None else list(ranks)
    outside = [r for r in range(world_size) if r not in members]
    assert all(out[r] is None for r in outside), f"ranks {outside} are outside the group and must return None"
    results = [out[r] for r in members]
    numel = sum(p.numel() for p in model_fn().parameters())
    assert all(r["numel"] == numel for r in results), "the driver's parameter count was changed"
    grad_sharding.assert_zero2_training(results, grad_sharding.replicated_reference(model_fn, batches, spec,
                                                                                    max_norm), case)
    return results, ledger, members, len(batches)


def check_zero2_training(optimizer_cls: Any, case: str) -> None:
    """Case ``case``: after every step the parameters equal float64 replicated training's (clip + optimizer)."""
    _zero2_case(optimizer_cls, case)


def check_zero2_kept_and_sent(optimizer_cls: Any, case: str) -> None:
    """Case ``case``: correct; after every step each rank keeps at most an equal share of state and
    4 ceil(P/N) (2 + s) bytes in all; per step tensor collectives only, no all-reduce of more than one
    element, at most one padded all-reduce's ring bytes (+ 64)."""
    results, ledger, members, num_steps = _zero2_case(optimizer_cls, case)
    grad_sharding.assert_zero2_held_bytes(results, ZERO2_CASES[case][2], case)
    grad_sharding.assert_zero2_communication(ledger, members, results[0]["numel"], num_steps, case)


STAGE_MISTAKES = ((1, "the gradient is still replicated (that is stage 1)"),
                  (3, "the fp16 parameters are sharded too (that is stage 3)"),
                  (0, "nothing is sharded (that is stage 0)"))


def check_zero2_memory(fn: Callable[[int, int, int], Any], cases: Sequence[tuple[int, int, int]]) -> None:
    """``fn(num_params, N, k)`` equals ``adam_memory_bytes(..., stage=2)`` on every case."""
    for psi, n, k in cases:
        got = plain(fn(psi, n, k), f"zero2_memory_bytes{(psi, n, k)}")
        message = grad_sharding.zero2_mismatch((psi, n, k), got, adam_memory_bytes(psi, n, stage=2, k=k))
        if message:
            for stage, why in STAGE_MISTAKES:
                other = adam_memory_bytes(psi, n, stage=stage, k=k)
                if type(got) in (int, float) and abs(got - other) <= 1e-9 * abs(got):
                    message += f" Your value means {why}."
            raise AssertionError(message)
