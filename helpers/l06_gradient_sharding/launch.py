"""Lesson 06 under torchrun: ZeRO-2 training with your Zero2Optimizer, against PyTorch's DDP.

    python -m helpers.launch release/06_gradient_sharding/06_gradient_sharding.ipynb --nproc-per-node 2

Every rank builds the same TinyMLP and trains it with your ``Zero2Optimizer`` around SGD with
momentum, clipping by ``max_norm``, on its rows of each batch. The reference is PyTorch's own:
``DistributedDataParallel`` with ``torch.nn.utils.clip_grad_norm_`` and the same SGD, trained on the
same rows. The report adds the bytes your optimizer object holds after training, as the exercise
measures them (``helpers.l06_gradient_sharding.held_tensor_bytes``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from helpers.l06_gradient_sharding import held_tensor_bytes
from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import TinyMLP, make_regression_batch, shard_batch

NEEDS = ("Zero2Optimizer",)
LR, MOMENTUM, MAX_NORM, SEED = 0.1, 0.9, 1.3, 6  # the gradient norm is about 1.2-1.4: some steps are clipped
TOLERANCE = 1e-5  # float32, summed in a different order than DDP's buckets


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="SGD steps (default 4)")


def sgd(tensors: list[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.SGD(tensors, lr=LR, momentum=MOMENTUM)


def main(student, ctx: Context) -> Outcome:
    torch.manual_seed(SEED)
    model = TinyMLP().to(ctx.device)
    torch.manual_seed(SEED)
    reference = ctx.ddp(TinyMLP().to(ctx.device))
    reference_sgd = sgd(list(reference.parameters()))
    parameters = list(model.parameters())
    zero2 = student.Zero2Optimizer(parameters, sgd, max_norm=MAX_NORM)
    clipped = 0
    for step in range(ctx.args.steps):
        x, y = make_regression_batch(4 * ctx.world_size, seed=100 + step)
        xs, ys = (t.to(ctx.device) for t in shard_batch(x, y, ctx.rank, ctx.world_size))
        zero2.zero_grad()
        F.mse_loss(model(xs), ys).backward()
        zero2.step()
        with ctx.not_recorded():
            reference_sgd.zero_grad()
            F.mse_loss(reference(xs), ys).backward()
            clipped += int(torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM) > MAX_NORM)
            reference_sgd.step()
    with torch.no_grad():
        expected = parameters_to_vector(reference.parameters())
        diff = float((parameters_to_vector(model.parameters()) - expected).abs().max())
        scale = float(expected.abs().max())
    numel = sum(p.numel() for p in parameters)
    share = -(-numel // ctx.world_size)
    return Outcome(equal=diff <= TOLERANCE * scale, reference="DDP + clip_grad_norm_ + SGD with momentum (PyTorch)",
                   detail=f"after {ctx.args.steps} steps, max |parameter difference| {diff:.2e} "
                          f"(tolerance {TOLERANCE:g} x {scale:.2f})",
                   held_bytes=held_tensor_bytes(zero2, parameters)["held"],
                   notes=[f"clipped on {clipped} of {ctx.args.steps} steps (max_norm {MAX_NORM:g})",
                          f"held: the tensors your optimizer object keeps besides the parameters, as the exercise "
                          f"measures them; ZeRO-2's share of a master slice, its gradient and momentum is "
                          f"3 x 4 x ceil({numel}/{ctx.world_size}) = {12 * share} bytes"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
