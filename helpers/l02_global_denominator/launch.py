"""Lesson 02 under torchrun: your train_window over uneven windows, one optimizer step each.

    python -m helpers.launch release/02_global_denominator/02_global_denominator.ipynb --nproc-per-node 3

Every rank wraps the same tiny language model in ``DistributedDataParallel``, builds SGD with
momentum, and calls your ``train_window`` once per window with its own micro-batches: lengths vary
per sequence, micro-batch and rank, the last rank has no valid token in the first window, and the
last window has none at all. The reference is one process that holds every rank's micro-batches
and takes one SGD step per window on the mean loss over the window's valid tokens (no step for a
window without any), in float64; each call must also return the window's valid-token count.
"""
from __future__ import annotations

import copy

import torch

from helpers.shared.data import TokenBatch, uneven_window
from helpers.l02_global_denominator import tiny_lm, token_cross_entropy
from helpers.launch.worker import Context, Outcome, worker

NEEDS = ("train_window",)
LR, MOMENTUM, SEED = 0.2, 0.9, 5
ATOL, RTOL = 2e-5, 1e-4  # the exercise's tolerances against float64


def windows(world_size: int) -> list[list[list[TokenBatch]]]:
    """``window[rank][k]``: three windows, the last rank empty in the first, nobody valid in the last."""
    nobody = uneven_window(world_size, 1, empty_ranks=tuple(range(world_size)), seed=3)
    return [uneven_window(world_size, 2, empty_ranks=(world_size - 1,), seed=1),
            uneven_window(world_size, 3, seed=2), nobody]


def reference(model: torch.nn.Module, all_windows: list) -> tuple[torch.Tensor, list[int]]:
    """float64 single-process SGD, one step per window on the mean over its valid tokens; and each window's count."""
    model = copy.deepcopy(model).double()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    counts = []
    for window in all_windows:
        batches = [mb for per_rank in window for mb in per_rank]
        count = sum(mb.num_valid for mb in batches)
        counts.append(count)
        if count == 0:
            continue
        opt.zero_grad()
        total = sum((token_cross_entropy(model(mb.tokens), mb.targets) * mb.mask).sum() for mb in batches)
        (total / count).backward()
        opt.step()
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach(), counts


def main(student, ctx: Context) -> Outcome:
    model = tiny_lm(SEED).to(ctx.device)
    initial = copy.deepcopy(model).cpu()
    ddp = ctx.ddp(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR, momentum=MOMENTUM)
    all_windows = windows(ctx.world_size)
    returned = []
    for window in all_windows:
        mine = [TokenBatch(mb.tokens.to(ctx.device), mb.targets.to(ctx.device), mb.mask.to(ctx.device))
                for mb in window[ctx.rank]]
        returned.append(student.train_window(ddp, opt, mine))
    expected, counts = reference(initial, all_windows)
    trained = torch.nn.utils.parameters_to_vector(model.parameters()).detach().cpu().double()
    diff = (trained - expected).abs()
    close = bool((diff <= ATOL + RTOL * expected.abs()).all())
    wrong = [] if close else [f"max |parameter difference| {float(diff.max()):.2e}"]
    if returned != counts:
        wrong.append(f"returned counts {returned}, expected {counts}")
    return Outcome(equal=not wrong, reference="single-process SGD on the mean over valid tokens (float64)",
                   detail="; ".join(wrong) or f"{len(counts)} windows of {counts} valid tokens: parameters within "
                                             f"{ATOL:g} + {RTOL:g} x |expected|, counts returned",
                   held_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
                   notes=["held: the model's parameters (replicated); the collectives are your explicit calls "
                          "(DDP's gradient all-reduce inside backward() is not counted)"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0])
