"""Lesson 06 under torchrun: ZeRO-2 training with your gradient-sharding functions.

    python -m helpers.launch release/06_gradient_sharding/06_gradient_sharding.ipynb --nproc-per-node 2

Every rank builds the same TinyMLP and trains it for ``--steps`` SGD steps on its shard of each
batch: the flat local gradient goes through your ``reduce_scatter_gradients``, your
``sharded_clip_grad_norm_`` clips the owned shard by the global norm, the rank updates the
parameters of its ``owned_range`` and an all-gather of the updated slices gives every rank the
whole model again. The reference is PyTorch's own: ``DistributedDataParallel`` with
``torch.nn.utils.clip_grad_norm_`` and ``torch.optim.SGD``, trained on the same shards.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from helpers.launch.worker import Context, Outcome, worker
from helpers.models import TinyMLP, make_regression_batch, shard_batch

NEEDS = ("owned_range", "reduce_scatter_gradients", "sharded_clip_grad_norm_")
LR, MAX_NORM, SEED = 0.1, 1.3, 6  # the gradient norm is about 1.2-1.4: some steps are clipped, some not
TOLERANCE = 1e-5  # float32, summed in a different order than DDP's buckets


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=4, help="SGD steps (default 4)")


def zero2_step(student, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: Context) -> int:
    """One ZeRO-2 SGD step with the student's functions; returns the bytes of gradient this rank keeps."""
    model.zero_grad()
    xs, ys = shard_batch(x, y, ctx.rank, ctx.world_size)
    F.mse_loss(model(xs), ys).backward()
    flat_grad = parameters_to_vector([p.grad for p in model.parameters()])
    shard = student.reduce_scatter_gradients(flat_grad)
    student.sharded_clip_grad_norm_([shard], MAX_NORM)
    numel = flat_grad.numel()
    start, stop = student.owned_range(numel, ctx.world_size, ctx.rank)
    flat = parameters_to_vector(model.parameters()).detach()
    size = shard.numel()
    mine = torch.zeros(size, dtype=flat.dtype, device=flat.device)
    mine[: stop - start] = flat[start:stop] - LR * shard[: stop - start]
    gathered = torch.empty(size * ctx.world_size, dtype=flat.dtype, device=flat.device)
    dist.all_gather_single(gathered, mine)
    vector_to_parameters(gathered[:numel], model.parameters())
    for p in model.parameters():
        p.grad = None
    return size * shard.element_size()


def main(student, ctx: Context) -> Outcome:
    torch.manual_seed(SEED)
    model = TinyMLP().to(ctx.device)
    torch.manual_seed(SEED)
    with ctx.not_recorded():
        reference = DistributedDataParallel(TinyMLP().to(ctx.device),
                                            device_ids=[ctx.local_rank] if ctx.backend == "nccl" else None)
    sgd = torch.optim.SGD(reference.parameters(), lr=LR)
    kept, clipped = 0, 0
    for step in range(ctx.args.steps):
        x, y = (t.to(ctx.device) for t in make_regression_batch(4 * ctx.world_size, seed=100 + step))
        kept = zero2_step(student, model, x, y, ctx)
        with ctx.not_recorded():
            sgd.zero_grad()
            xs, ys = shard_batch(x, y, ctx.rank, ctx.world_size)
            F.mse_loss(reference(xs), ys).backward()
            clipped += int(torch.nn.utils.clip_grad_norm_(reference.parameters(), MAX_NORM) > MAX_NORM)
            sgd.step()
    with torch.no_grad():
        diff = (parameters_to_vector(model.parameters()) - parameters_to_vector(reference.parameters())).abs().max()
        scale = parameters_to_vector(reference.parameters()).abs().max()
    held = kept + sum(p.numel() * p.element_size() for p in model.parameters())
    return Outcome(equal=bool(diff <= TOLERANCE * scale), reference="DDP + clip_grad_norm_ + SGD (PyTorch)",
                   detail=f"after {ctx.args.steps} steps, max |parameter difference| {float(diff):.2e} "
                          f"(tolerance {TOLERANCE:g} x {float(scale):.2f})",
                   held_bytes=held, notes=[f"clipped on {clipped} of {ctx.args.steps} steps (max_norm {MAX_NORM:g})",
                          "held: the full parameters and the owned gradient shard"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments)
