"""Lesson 10, worker failure and restart: what grading may send into the student's kernel.

The per-rank drivers of the hidden checkpoint and restart checks: a fresh rank loading an empty directory
(:func:`load_fresh_on_rank`), a job saving steps 2 and 4 (:func:`save_twice_on_rank`), a restarted rank of
another world size loading (:func:`membership_load_on_rank`) and the elastic restart's training run
(:func:`elastic_on_rank`, with its settings :data:`ELASTIC`); each runs the student's functions on gloo ranks
and returns what they did. :data:`KERNEL_SIDE` names them. Nothing here is a reference or an expected value:
the checks compare in the grader (:mod:`.verdicts`).
"""
from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle
import numpy as np
import torch

from helpers import l10_worker_failure as lesson
from helpers.shared.state import state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE = frozenset({
    "elastic_on_rank",
    "load_fresh_on_rank",
    "membership_load_on_rank",
    "save_twice_on_rank",
})

# Ship this module's drivers by value: the notebook's kernel never imports the autograder package.
# They use only torch, numpy and helpers.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def load_fresh_on_rank(load_fn: Callable[..., Any], directory: str) -> dict[str, Any]:
    """What ``load_fn`` returns into a fresh model and Adam, and the model's parameters after it."""
    model = lesson.MODEL()
    lesson.as_restart(model, 1)
    meta = load_fn(directory, model, torch.optim.Adam(model.parameters(), **lesson.ADAM), None)
    return {"meta": meta, "params": state_of(model)}


def save_twice_on_rank(save_fn: Callable[..., Any], directory: str) -> dict[str, Any]:
    """Save at steps 2 and 4 of local training; return the parameters at each save."""
    model = lesson.MODEL()
    optimizer = torch.optim.Adam(model.parameters(), **lesson.ADAM)
    stream = lesson.GlobalStream()
    saved = {}
    for step in (1, 2, 3, 4):
        lesson.local_step(model, optimizer, stream, None)
        if step % 2 == 0:
            save_fn(directory, step, model, optimizer, stream.state_dict(), None)
            saved[step] = state_of(model)
    return saved


def membership_load_on_rank(load_fn: Callable[..., Any], directory: str) -> dict[str, Any]:
    """A restarted rank of another world size loads: what load returns, the parameters, and the next
    draws of every generator after the load and as they would have been without it."""
    model = lesson.MODEL()
    lesson.as_restart(model, 1)
    optimizer = torch.optim.Adam(model.parameters(), **lesson.ADAM)
    before = torch.get_rng_state(), np.random.get_state(), random.getstate()
    meta = load_fn(directory, model, optimizer, None)
    after = lesson.rng_draws()
    torch.set_rng_state(before[0]), np.random.set_state(before[1]), random.setstate(before[2])
    return {"meta": meta, "params": state_of(model), "rng": after, "rng_untouched": lesson.rng_draws()}


ELASTIC = dict(stream=dict(num_samples=24, batch_size=12, seed=5), lr=0.1, momentum=0.9)


def elastic_on_rank(train_fn: Callable[..., Any], directory: str, num_steps: int, every: int,
                     attempt: int) -> dict[str, Any]:
    model = lesson.MODEL()
    model.noisy = False
    lesson.as_restart(model, attempt)
    optimizer = torch.optim.SGD(model.parameters(), lr=ELASTIC["lr"], momentum=ELASTIC["momentum"])
    stream = lesson.GlobalStream(**ELASTIC["stream"])
    return {"returned": train_fn(model, optimizer, stream, directory, num_steps, every), "params": state_of(model),
            "batches": stream.drawn}
