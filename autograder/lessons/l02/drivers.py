"""Lesson 02, one global denominator: what grading may send into the student's kernel.

The hidden-test drivers that run the student's loss and training functions there (:data:`KERNEL_SIDE`).
No expected value is involved: the checks compare what they return in the grader (:mod:`.verdicts`).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import cloudpickle
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from autograder.lessons.l01.drivers import in_subgroup
from helpers import l02_global_denominator as D
from helpers.shared.state import state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "padded_loss_and_gradient",
    "train_in_subgroup_on_rank",
})

Window = Sequence[D.MicroBatches]  # window[rank][k]
# Ship this module's kernel-side drivers by value: the notebook's kernel never imports the
# autograder package. The drivers use only torch and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def padded_loss_and_gradient(loss_fn: Callable[..., Any], losses: torch.Tensor, valid: torch.Tensor,
                             padding: float, mask: torch.Tensor, global_count: int,
                             world_size: int) -> dict[str, Any]:
    """``loss_fn`` of token losses whose positions outside ``valid`` hold ``padding``, backpropagated.

    The token losses are ``torch.where(valid, leaf, padding)`` for a leaf copy of ``losses``;
    ``loss_fn(token_losses, mask, global_count, world_size)`` is reported by
    :func:`helpers.l02_global_denominator.backward_report` with respect to that leaf (plain data). No
    expected value is involved: the checks compare in the grader.
    """
    leaf = losses.detach().clone().requires_grad_()
    token_losses = torch.where(valid, leaf, torch.full_like(leaf, padding))
    return D.backward_report(loss_fn(token_losses, mask, global_count, world_size), leaf)


def train_in_subgroup_on_rank(train_fn: Callable[..., Any], model_seed: int, windows: Sequence[Window], lr: float,
                              momentum: float, ranks: Sequence[int]) -> dict[str, Any] | None:
    """:func:`helpers.l02_global_denominator.train_on_rank` on the members of ``new_group(ranks)`` only.

    Each member wraps its TinyLM in ``DistributedDataParallel`` on the group and calls
    ``train_fn(ddp_model, optimizer, window[group rank], group=group)`` per window; outsiders
    return ``None`` (:func:`autograder.lessons.l01.in_subgroup`).
    """
    def member(group: dist.ProcessGroup) -> dict[str, Any]:
        model = D.tiny_lm(model_seed)
        ddp = DistributedDataParallel(model, process_group=group)
        opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum)
        me = dist.get_rank(group)
        returned = [train_fn(ddp, opt, window[me], group=group) for window in windows]
        return {"state": state_of(model), "returned": returned}

    return in_subgroup(ranks, member)
