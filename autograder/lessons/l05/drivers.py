"""Lesson 05's drivers: what grading may send into the student's kernel.

:class:`IntermittentMLP` and :func:`idle_mlp`, hidden models the checks of
:mod:`autograder.lessons.l05.verdicts` train with the student's optimizer. Nothing here is a
reference, an expected value or a solution.
"""
from __future__ import annotations

import sys
from typing import Sequence

import cloudpickle
import torch
from torch import nn

from helpers.shared.state import frozen_first

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "IntermittentMLP",
    "idle_mlp",
})

# Ship this module's objects by value: the kernel cannot import the autograder package, and a
# rank then never imports it (its nbgrader imports cost seconds per rank process). They use
# only torch and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


class IntermittentMLP(nn.Module):
    """A 5-8-3 MLP whose ``side`` layer takes part only in the forward calls numbered in ``uses``.

    Calls are counted from 0 per model; one forward per training step makes ``side`` get a
    gradient in some steps and ``None`` in the others, the same on every rank, so its Adam
    step count differs from the number of optimizer steps.
    """

    def __init__(self, uses: Sequence[int] = (1, 3)) -> None:
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.side = nn.Linear(8, 8)
        self.head = nn.Linear(8, 3)
        self.uses, self.calls = tuple(uses), 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.body(x))
        if self.calls in self.uses:
            h = h + torch.tanh(self.side(h))
        self.calls += 1
        return self.head(h)


def idle_mlp() -> nn.Module:
    """:class:`IntermittentMLP` whose ``side`` layer is never used and whose first weight is frozen:
    three parameters (``body.weight``, ``side.weight``, ``side.bias``) that never have a gradient."""
    return frozen_first(IntermittentMLP(uses=()))
