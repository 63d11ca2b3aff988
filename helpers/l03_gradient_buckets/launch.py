"""Lesson 03 under torchrun: your GradBuckets and train_step, against PyTorch's DDP.

    python -m helpers.launch release/03_gradient_buckets/03_gradient_buckets.ipynb --nproc-per-node 3

Every rank builds the same MLP, attaches your ``GradBuckets`` to it and trains with your
``train_step`` on its rows of each batch; the all-reduces your buckets launch during backward run
on the real process group, overlapping what is left of backward. The reference is
``DistributedDataParallel`` with its own buckets, trained by the usual loop on the same rows.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import make_regression_batch, shard_batch
from helpers.l07_parameter_sharding import layered_mlp

NEEDS = ("GradBuckets", "train_step")
WIDTHS, LR, SEED = (8, 32, 32, 32, 4), 0.05, 3
TOLERANCE = 1e-5  # float32, summed in another order than DDP's buckets


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="SGD steps (default 4)")


def main(student, ctx: Context) -> Outcome:
    torch.manual_seed(SEED)
    model = layered_mlp(WIDTHS).to(ctx.device)
    torch.manual_seed(SEED)
    reference = ctx.ddp(layered_mlp(WIDTHS).to(ctx.device))
    buckets = student.GradBuckets(model)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    reference_sgd = torch.optim.SGD(reference.parameters(), lr=LR)
    for step in range(ctx.args.steps):
        x, y = make_regression_batch(4 * ctx.world_size, WIDTHS[0], WIDTHS[-1], seed=300 + step)
        xs, ys = (t.to(ctx.device) for t in shard_batch(x, y, ctx.rank, ctx.world_size))
        student.train_step(model, sgd, buckets, xs, ys)
        with ctx.not_recorded():
            reference_sgd.zero_grad()
            F.mse_loss(reference(xs), ys).backward()
            reference_sgd.step()
    with torch.no_grad():
        expected = parameters_to_vector(reference.parameters())
        diff = float((parameters_to_vector(model.parameters()) - expected).abs().max())
        scale = float(expected.abs().max())
    return Outcome(equal=diff <= TOLERANCE * scale, reference="DDP + SGD (PyTorch)",
                   detail=f"after {ctx.args.steps} steps, max |parameter difference| {diff:.2e} "
                          f"(tolerance {TOLERANCE:g} x {scale:.2f})",
                   held_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
                   notes=["held: the model's parameters (replicated); one all_reduce per bucket and step"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
