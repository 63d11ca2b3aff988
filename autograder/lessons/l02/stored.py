"""Lesson 02, one global denominator: the expected values of the visible tests and the factors the
chapter and its explorer show, stored in ``helpers/stored`` (:data:`STORED`).
"""
from __future__ import annotations

import itertools
from typing import Any

from autograder.store import FLOAT32_RESULTS
from helpers import l02_global_denominator as D
from helpers.shared.data import tensors_to_json, uneven_window

from .verdicts import factors, global_mean_gradients, mean_of_means_gradients, sgd_reference

# The visible tests of source/02_global_denominator (cells test_global_token_loss and
# test_train_window) run these cases; change them together.
VISIBLE_LOSS_SEED, VISIBLE_LOSS_WINDOW = 11, {"world_size": 2, "micro_batches": 2, "seed": 3}
VISIBLE_TRAIN_SEED, VISIBLE_TRAIN_WINDOWS = 5, [
    {"world_size": 2, "micro_batches": 2, "empty_ranks": (1,), "seed": 1},
    {"world_size": 2, "micro_batches": 2, "seed": 2},
]
VISIBLE_TRAIN_LR = 0.2
# Counts the chapter shows: its window of section 2.1 (and without the empty rank), and
# rank 0 holding rho times the 8 tokens of ranks 1 and 2 (optional section 2.B).
CHAPTER_COUNTS = [[13, 12, 0], [13, 12]] + [[8 * rho, 8, 8] for rho in (1, 2, 4, 8, 16, 32)]


def visible_references() -> dict[str, Any]:
    """The float64 tensors the visible tests compare with (see ``helpers.l02_global_denominator.stored_reference``)."""
    window = uneven_window(**VISIBLE_LOSS_WINDOW)
    model = D.tiny_lm(VISIBLE_LOSS_SEED)
    windows = [uneven_window(**w) for w in VISIBLE_TRAIN_WINDOWS]
    return {
        "loss_gradients": tensors_to_json(global_mean_gradients(model, window)),
        "loss_mean_of_means": tensors_to_json(mean_of_means_gradients(model, window)),
        "train_state": tensors_to_json(sgd_reference(D.tiny_lm(VISIBLE_TRAIN_SEED), windows,
                                                     lr=VISIBLE_TRAIN_LR, momentum=0.0)),
    }


def token_factors() -> dict[str, list[float | None]]:
    """Factors ``T / (N n_r)`` keyed ``"n_0,n_1,..."``: the explorer's grid and the chapter's counts."""
    grid = [list(c) for c in itertools.product(D.EXPLORER_COUNTS, repeat=D.EXPLORER_RANKS)]
    return {",".join(map(str, counts)): [None if f is None else float(f"{f:.9g}") for f in factors(counts)]
            for counts in grid + CHAPTER_COUNTS}


STORED_ROUNDING = {D.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {D.STORED_REFERENCES: visible_references, D.STORED_FACTORS: token_factors}
