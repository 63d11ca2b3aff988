"""Lesson 04 under torchrun: your train_window with accumulation, loss scaling, clipping and skips.

    python -m helpers.launch release/04_accumulation/04_accumulation.ipynb --nproc-per-node 3

Every rank wraps the same MLP in ``DistributedDataParallel``, builds Adam, and calls your
``train_window`` once per window with its own micro-batches (row counts differ per rank and
micro-batch), with ``max_norm`` and a ``loss_scale``. The third window holds an ``inf`` in one
micro-batch of one rank: every rank must skip it. The reference is one process training in float64
on each whole window, concatenated: ``mse_loss``, backward, ``clip_grad_norm_``, Adam's step.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector

from helpers.l04_accumulation import make_window
from helpers.launch.worker import Context, Outcome, worker
from helpers.shared.models import TinyMLP

NEEDS = ("train_window",)
LR, MAX_NORM, LOSS_SCALE, SEED = 0.05, 0.5, 1024.0, 4
ATOL, RTOL = 1e-5, 1e-4  # the exercise's tolerances against float64
K = 3  # micro-batches per window


def windows(world_size: int) -> list:
    """Four windows of ``window[rank][k] = (x, y)``; the third poisoned on the last rank's second micro-batch."""
    sizes = [[1 + (r + k) % 3 for k in range(K)] for r in range(world_size)]
    return [make_window(sizes, seed=40 + w, poison=(world_size - 1, 1) if w == 2 else None) for w in range(4)]


def reference(model: torch.nn.Module, all_windows: list) -> tuple[torch.Tensor, list[bool]]:
    """float64, one process: one Adam step per whole window, clipped; a window with an inf is skipped."""
    model = copy.deepcopy(model).double()
    adam = torch.optim.Adam(model.parameters(), lr=LR)
    stepped = []
    for window in all_windows:
        x = torch.cat([mx for per_rank in window for mx, _ in per_rank]).double()
        y = torch.cat([my for per_rank in window for _, my in per_rank]).double()
        adam.zero_grad()
        F.mse_loss(model(x), y).backward()
        finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())
        if finite:
            torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
            adam.step()
        stepped.append(finite)
    return parameters_to_vector(model.parameters()).detach(), stepped


def main(student, ctx: Context) -> Outcome:
    torch.manual_seed(SEED)
    model = TinyMLP().to(ctx.device)
    initial = copy.deepcopy(model).cpu()
    ddp = ctx.ddp(model)
    adam = torch.optim.Adam(ddp.parameters(), lr=LR)
    all_windows = windows(ctx.world_size)
    stepped = []
    for window in all_windows:
        mine = [(x.to(ctx.device), y.to(ctx.device)) for x, y in window[ctx.rank]]
        _, step_taken = student.train_window(ddp, adam, mine, max_norm=MAX_NORM, loss_scale=LOSS_SCALE)
        stepped.append(bool(step_taken))
    expected, expected_steps = reference(initial, all_windows)
    trained = parameters_to_vector(model.parameters()).detach().cpu().double()
    diff = (trained - expected).abs()
    wrong = [] if bool((diff <= ATOL + RTOL * expected.abs()).all()) else [
        f"max |parameter difference| {float(diff.max()):.2e}"]
    if stepped != expected_steps:
        wrong.append(f"stepped {stepped}, expected {expected_steps}")
    return Outcome(equal=not wrong, reference="one process on the whole windows in float64 (clip_grad_norm_, Adam)",
                   detail="; ".join(wrong) or f"{len(all_windows)} windows of {K} micro-batches, stepped "
                                             f"{stepped}: parameters within {ATOL:g} + {RTOL:g} x |expected|",
                   held_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
                   notes=[f"max_norm {MAX_NORM:g}, loss_scale {LOSS_SCALE:g}; the collectives are your explicit "
                          f"calls (DDP's gradient all-reduce inside backward() is not counted)"])


if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0])
