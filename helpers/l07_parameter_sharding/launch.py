"""Lesson 07 under torchrun: FULL_SHARD training with your FullyShardedUnit and train_full_shard.

    python -m helpers.launch release/07_parameter_sharding/07_parameter_sharding.ipynb --nproc-per-node 2

Every rank builds the same MLP, wraps each Linear layer in your ``FullyShardedUnit`` and trains
with your ``train_full_shard`` on its rows of each batch. Afterwards every unit is gathered once to
read the trained parameters, then freed. The reference is single-process SGD on the full batches in
float64, from the same initial parameters: with equal shards, the mean of the ranks' mean-loss
gradients is the full batch's.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import make_regression_batch, shard_batch
from helpers.l07_parameter_sharding import layered_mlp

NEEDS = ("FullyShardedUnit", "train_full_shard")
WIDTHS, LR, SEED = (8, 16, 12, 4), 0.1, 7
TOLERANCE = 1e-5  # float32 against float64, a few steps


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="SGD steps, one batch each (default 4)")


def reference_sgd(model: torch.nn.Module, batches: list, lr: float) -> torch.Tensor:
    """Single-process full-batch SGD in float64; the trained parameters as one vector."""
    model = copy.deepcopy(model).double()
    for x, y in batches:
        model.zero_grad()
        F.mse_loss(model(x.double()), y.double()).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
    return parameters_to_vector(model.parameters()).detach()


def full_parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the storages behind the module parameters (0 once every unit is freed)."""
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    return sum(storages.values())


def main(student, ctx: Context) -> Outcome:
    torch.manual_seed(SEED)
    model = layered_mlp(WIDTHS).to(ctx.device)
    initial = copy.deepcopy(model).cpu()
    batches = [make_regression_batch(4 * ctx.world_size, WIDTHS[0], WIDTHS[-1], seed=200 + k)
               for k in range(ctx.args.steps)]
    units = [student.FullyShardedUnit(m) for m in model[::2]]
    mine = [tuple(t.to(ctx.device) for t in shard_batch(x, y, ctx.rank, ctx.world_size)) for x, y in batches]
    losses = student.train_full_shard(model, units, mine, LR)
    held = sum(u.shard.numel() * u.shard.element_size() for u in units)
    between_steps = full_parameter_bytes(model)
    for unit in units:
        unit.gather()
    trained = parameters_to_vector(model.parameters()).detach().cpu().double()
    for unit in units:
        unit.free()
    expected = reference_sgd(initial, batches, LR)
    diff = float((trained - expected).abs().max())
    scale = float(expected.abs().max())
    return Outcome(equal=diff <= TOLERANCE * scale, reference="single-process full-batch SGD (float64)",
                   detail=f"after {len(losses)} steps, max |parameter difference| {diff:.2e} "
                          f"(tolerance {TOLERANCE:g} x {scale:.2f})",
                   held_bytes=held,
                   notes=[f"held: the units' shards; full parameters held between steps: {between_steps} bytes "
                          f"(FULL_SHARD: 0)"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
