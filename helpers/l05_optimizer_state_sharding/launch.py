"""Lesson 05 under torchrun: your ZeRO-1 optimizers, ShardedAdam and FlatShardedAdam, against one process.

    python -m helpers.launch release/05_optimizer_state_sharding/05_optimizer_state_sharding.ipynb --nproc-per-node 4

Every rank builds the same TinyMLP 20-6-3 (159 elements, 120 in one weight, so whole-parameter
owners cannot share the state equally) and trains it twice on its rows of each batch: with your
``ShardedAdam`` (whole parameters per owner) and with your ``FlatShardedAdam`` (equal shards,
clipping by ``max_norm``); each ``step()`` gets the rank's own gradients. The reference is one
process training on the full batches in float64 with ``torch.nn.utils.clip_grad_norm_`` (for the
flat optimizer) and ``torch.optim.Adam``. The report gives ShardedAdam's state bytes per rank.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import TinyMLP, make_regression_batch, shard_batch

NEEDS = ("ShardedAdam", "FlatShardedAdam")
SHAPE, LR, MAX_NORM, SEED = {"in_features": 20, "hidden": 6, "out_features": 3}, 0.01, 0.5, 5
ATOL, RTOL = 2e-5, 1e-4  # the exercises' tolerances against float64


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="Adam steps (default 4)")


def batches(steps: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [make_regression_batch(2 * world_size, SHAPE["in_features"], SHAPE["out_features"], seed=500 + k)
            for k in range(steps)]


def reference(model: torch.nn.Module, data: list, max_norm: float | None) -> torch.Tensor:
    """One process, float64: clip_grad_norm_ (if max_norm) and Adam on the full batches."""
    model = copy.deepcopy(model).double()
    adam = torch.optim.Adam(model.parameters(), lr=LR)
    for x, y in data:
        adam.zero_grad()
        F.mse_loss(model(x.double()), y.double()).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        adam.step()
    return parameters_to_vector(model.parameters()).detach()


def train(student_optimizer, ctx: Context, data: list) -> tuple[torch.Tensor, int]:
    """Train a fresh model with ``student_optimizer(params)``; its parameters and the optimizer's state bytes."""
    torch.manual_seed(SEED)
    model = TinyMLP(**SHAPE).to(ctx.device)
    optimizer = student_optimizer(list(model.parameters()))
    for x, y in data:
        optimizer.zero_grad()
        xs, ys = (t.to(ctx.device) for t in shard_batch(x, y, ctx.rank, ctx.world_size))
        F.mse_loss(model(xs), ys).backward()
        optimizer.step()
    state = optimizer.state_bytes() if hasattr(optimizer, "state_bytes") else -1
    return parameters_to_vector(model.parameters()).detach().cpu().double(), state


def main(student, ctx: Context) -> Outcome:
    data = batches(ctx.args.steps, ctx.world_size)
    torch.manual_seed(SEED)
    initial = TinyMLP(**SHAPE)
    whole, whole_bytes = train(lambda params: student.ShardedAdam(params, lr=LR), ctx, data)
    flat, _ = train(lambda params: student.FlatShardedAdam(params, lr=LR, max_norm=MAX_NORM), ctx, data)
    wrong = []
    for name, got, expected in [("ShardedAdam", whole, reference(initial, data, None)),
                                ("FlatShardedAdam", flat, reference(initial, data, MAX_NORM))]:
        diff = (got - expected).abs()
        if not bool((diff <= ATOL + RTOL * expected.abs()).all()):
            wrong.append(f"{name}: max |parameter difference| {float(diff.max()):.2e}")
    numel = sum(p.numel() for p in initial.parameters())
    share = -(-numel // ctx.world_size)
    return Outcome(equal=not wrong, reference="one process, clip_grad_norm_ + Adam in float64",
                   detail="; ".join(wrong) or f"both optimizers within {ATOL:g} + {RTOL:g} x |expected| after "
                                             f"{ctx.args.steps} steps",
                   held_bytes=whole_bytes,
                   notes=[f"held: ShardedAdam's state_bytes() (whole parameters per owner); an equal share of "
                          f"Adam's two moments would be 8 x ceil({numel}/{ctx.world_size}) = {8 * share} bytes"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
