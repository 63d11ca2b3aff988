"""Lesson 01 under torchrun: your ReplicatedModel in a training loop, against PyTorch's DDP.

    python -m helpers.launch release/01_replicated_training/01_replicated_training.ipynb --nproc-per-node 3

Every rank builds its own replica of an MLP with BatchNorm, seeded per rank, so the replicas
differ until your ``ReplicatedModel`` makes them agree, and trains it with SGD and momentum on its
rows of each batch. The reference is ``DistributedDataParallel`` around replicas built the same
way, trained by the same loop: parameters and buffers must end equal on every rank.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import BatchNormMLP, make_regression_batch, shard_batch

NEEDS = ("ReplicatedModel",)
SHAPE, LR, MOMENTUM, SEED = {"in_features": 6, "hidden": 12, "out_features": 3}, 0.1, 0.9, 11
ATOL, RTOL = 1e-6, 1e-5  # the exercise's tolerances against DDP


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="SGD steps (default 4)")


def train(wrap, ctx: Context) -> tuple[dict[str, torch.Tensor], int]:
    """Build this rank's replica (seeded per rank), wrap it, train; its parameters and buffers (float64), and
    their bytes."""
    torch.manual_seed(SEED + ctx.rank)
    module = BatchNormMLP(**SHAPE).to(ctx.device)
    model = wrap(module)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(ctx.args.steps):
        x, y = make_regression_batch(4 * ctx.world_size, SHAPE["in_features"], SHAPE["out_features"], seed=50 + step)
        xs, ys = (t.to(ctx.device) for t in shard_batch(x, y, ctx.rank, ctx.world_size))
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(xs), ys).backward()
        opt.step()
    state = module.state_dict()
    return ({k: v.detach().cpu().double() for k, v in state.items()},
            sum(v.numel() * v.element_size() for v in state.values()))


def main(student, ctx: Context) -> Outcome:
    mine, held = train(student.ReplicatedModel, ctx)
    with ctx.not_recorded():
        expected, _ = train(ctx.ddp, ctx)
    wrong = [name for name in expected if not torch.allclose(mine[name], expected[name], atol=ATOL, rtol=RTOL)]
    worst = max(float((mine[k] - expected[k]).abs().max()) for k in expected)
    return Outcome(equal=not wrong, reference="DistributedDataParallel (PyTorch)",
                   detail=(f"differs in {', '.join(wrong)}; " if wrong else "parameters and buffers equal; ")
                          + f"max |difference| {worst:.2e} after {ctx.args.steps} steps",
                   held_bytes=held,
                   notes=["held: the replica's parameters and buffers (replicated)"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
