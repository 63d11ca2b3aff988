"""Lesson 03, gradient buckets: what grading may send into the kernel (``KERNEL_SIDE``), nothing else.

The driver of ``train_step``'s hidden check on a model DDP wraps (:func:`train_on_rank`, with the
stand-in :class:`CountedWaits` for ``GradBuckets``), the hidden model whose ready order differs between
ranks (:class:`TimedBranches`) and the synchroniser's driver on a subgroup (:func:`synchroniser_on_rank`).
"""
from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.l01 import in_subgroup
from helpers import l03_gradient_buckets as buckets
from helpers.l03_gradient_buckets import MB, timed_block
from helpers.shared.state import mse, rank_shard, state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
# (The drivers' DDP runs are PyTorch's own, and the grader also compares with its float64 reference.)
KERNEL_SIDE = frozenset({
    "CountedWaits",
    "TimedBranches",
    "synchroniser_on_rank",
    "train_on_rank",
})

# Ship this module's rank-side code by value: a rank then never imports the autograder package
# (its nbgrader imports cost seconds per rank process, far more on a loaded machine).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- driver


class CountedWaits:
    """Stands in for ``GradBuckets`` in the hidden check of ``train_step``, on a model DDP wraps.

    DDP's reducer has averaged the gradients when backward returns, so ``wait()`` only counts
    its calls (the visible test's ``MarkingBuckets`` checks when it is called).
    """

    def __init__(self) -> None:
        self.calls = 0

    def wait(self) -> None:
        self.calls += 1


def train_on_rank(
    train_step_fn: Callable[..., float],
    model_fn: Callable[[], nn.Module],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    bucket_cap_bytes: int,
    first_bucket_cap_bytes: int,
) -> dict[str, Any]:
    """Train with the student's ``train_step`` on a model DDP wraps, then with DDP's usual loop.

    The student's step gets ``DDP(model)`` and a :class:`CountedWaits` for ``grad_buckets``:
    DDP's own reducer averages the gradients during backward, so no solution of the exercise
    enters the kernel. Both sides use the same caps (``bucket_cap_mb_list=[first, cap]``).
    Returns the initial state, both final states, the losses and the ``wait()`` calls.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    caps = [first_bucket_cap_bytes / MB, bucket_cap_bytes / MB]
    model = model_fn()
    init = state_of(model)
    wrapped = DDP(model, bucket_cap_mb_list=caps)
    waits = CountedWaits()
    opt = torch.optim.SGD(wrapped.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        losses.append(train_step_fn(wrapped, opt, waits, xs, ys))
    mine = state_of(model)

    ddp_model = model_fn()
    ddp = DDP(ddp_model, bucket_cap_mb_list=caps)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        ddp_opt.zero_grad(set_to_none=True)
        mse(ddp(xs), ys).backward()
        ddp_opt.step()
    return {"init": init, "state": mine, "ddp": state_of(ddp_model), "losses": losses, "waits": waits.calls}


class TimedBranches(nn.Module):
    """Two stem blocks, ``branches`` parallel blocks whose outputs are added, and two head blocks, the
    last an output block (:func:`helpers.l03_gradient_buckets.timed_block`).

    On odd ranks the branches run in reverse order in forward, and so in the other order in
    backward: the ready order differs between ranks. Outside a process group it runs as rank 0 does.
    """

    def __init__(self, in_features: int = 5, hidden: int = 20, out_features: int = 3, branches: int = 2,
                 block_backward_s: float = 2e-3) -> None:
        super().__init__()
        s = block_backward_s
        self.stem = nn.Sequential(*timed_block(in_features, hidden, s), *timed_block(hidden, hidden, s))
        self.branches = nn.ModuleList(nn.Sequential(*timed_block(hidden, hidden, s)) for _ in range(branches))
        self.head = nn.Sequential(*timed_block(hidden, hidden, s), *timed_block(hidden, out_features, s, output=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        flipped = dist.is_initialized() and dist.get_rank() % 2 == 1
        outputs = [branch(h) for branch in (reversed(self.branches) if flipped else self.branches)]
        return self.head(torch.stack(outputs).sum(0))


def synchroniser_on_rank(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                         batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         ranks: Sequence[int] | None) -> list[dict[str, Any]] | None:
    """:func:`helpers.l03_gradient_buckets.clocked_backwards` on the default group (``ranks=None``) or on the members of
    ``new_group(ranks)`` (the others return ``None``)."""
    if ranks is None:
        return buckets.clocked_backwards(grad_buckets_cls, model_fn, batches)
    return in_subgroup(ranks, lambda group: buckets.clocked_backwards(grad_buckets_cls, model_fn, batches, group))
