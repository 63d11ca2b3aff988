"""Lesson 09, equivalence tests: what grading may send into the student's kernel.

The driver of exercise 1's hidden checks, :func:`capture_steps`, trains the problem single-process and calls a
capture function after every step, and :func:`_grouped_adam` is the two-group optimizer it may train with;
:data:`KERNEL_SIDE` names them. Nothing here is a reference or an expected value: the checks compare in the
grader (:mod:`.verdicts`).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import cloudpickle
import torch
from torch import nn

from helpers import l09_equivalence_tests as eq

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "_grouped_adam",
    "capture_steps",
})

# Ship this module's kernel-side driver (:func:`capture_steps`) by value: the notebook's
# kernel never imports the autograder package. The driver uses only torch and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _grouped_adam(model: nn.Module, problem: eq.Problem) -> torch.optim.Adam:
    """Adam over ``model`` in two parameter groups, the vectors (in reverse) and then the matrices at twice the
    learning rate, resumed from the problem's checkpoint in the groups' order: neither its ``param_groups``, nor
    its ``state_dict()`` indices, nor the insertion order of ``optimizer.state`` follow ``model.named_parameters()``."""
    named = list(model.named_parameters())
    vectors = [p for _, p in reversed(named) if p.dim() == 1]
    matrices = [p for _, p in named if p.dim() != 1]
    optimizer = torch.optim.Adam([{"params": vectors}, {"params": matrices, "lr": 2 * eq.LR}],
                                 lr=eq.LR, betas=eq.BETAS, eps=eq.EPS)
    names = {id(p): n for n, p in named}
    for group in optimizer.param_groups:
        for p in group["params"]:
            n = names[id(p)]
            optimizer.state[p] = {"step": torch.tensor(float(eq.RESUME_STEP)),
                                  "exp_avg": problem.exp_avg[n].to(p.dtype).clone(),
                                  "exp_avg_sq": problem.exp_avg_sq[n].to(p.dtype).clone()}
    return optimizer


def capture_steps(capture_fn: Callable[..., Any], problem: eq.Problem, dtype: torch.dtype, groups: bool = False
                  ) -> list[Any]:
    """Both sides of :func:`.verdicts.capture_run`: ``capture_fn(model, optimizer, loss, clip_coef, mask)`` after
    every step.

    Gradients are zeroed in place, so a capture that keeps live tensors sees them change in
    later steps (in float64 too, where ``.double()`` returns the tensor itself); each step's
    mask is a fresh tensor, inverted in place once captured, and the loss and the clip
    coefficient given are changed in place too, so a capture that keeps the caller's tensors
    sees them change. ``groups``: the optimizer is :func:`_grouped_adam`. ``capture_fn``'s values
    are returned as they are at the end. Compares nothing and uses no reference.
    """
    model = eq.build_model(problem, dtype)
    optimizer = _grouped_adam(model, problem) if groups else eq.build_adam(model, problem)
    mine = []
    for x, y, mask in problem.batches:
        x, y, mask = x.to(dtype), y.to(dtype), mask.clone()
        optimizer.zero_grad(set_to_none=False)
        loss = eq.masked_mse(model(x), y, mask, mask.sum().item() * eq.OUT_FEATURES)
        loss.backward()
        coef = eq.clip(model).to(dtype)
        optimizer.step()
        mine.append(capture_fn(model, optimizer, loss, coef, mask))
        mask.logical_not_()
        loss.detach().add_(1.0)
        coef.add_(1.0)
    return mine
