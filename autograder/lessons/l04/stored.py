"""Lesson 04, accumulation: the results stored for the chapter and the visible tests (``STORED``).

The expected values of the assignment's visible cases (:func:`expected_training` of
:mod:`autograder.lessons.l04.verdicts`) and the communication numbers of the chapter's figure and
explorer (:func:`window_allreduce_cost`).
"""
from __future__ import annotations

import itertools
import math
from typing import Any

from autograder.lessons.l04.verdicts import ADAM, MLP, SGD, TrainCase, expected_training, window_allreduce_cost
from autograder.store import FLOAT32_RESULTS
from helpers import l04_accumulation as acc
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyMLP

# --------------------------------------------------------------------------- stored results

# The visible cases of source/04_accumulation (cells test_train_window_objective,
# _scaling_and_clipping and _skips_together); change them together.
_SIZES_2CD = [[2, 1, 3], [1, 4, 2]]
VISIBLE_CASES: dict[str, TrainCase] = {
    "objective": TrainCase(2, MLP, [[1, 4, 2], [3, 2, 6]], ADAM, math.inf, (1, 2)),
    "clip": TrainCase(2, MLP, _SIZES_2CD, SGD, 0.2, (7, 8)),
    "skip": TrainCase(2, MLP, _SIZES_2CD, SGD, 1.0, (9, 10), loss_scale=1024.0, poison={0: (1, 1)}),
}
CHAPTER_MICRO_BATCHES, CHAPTER_WORLD_SIZE = (1, 2, 4, 6, 8), 3  # notebooks/04 section 4.3, TinyMLP in float32


def visible_references() -> dict[str, Any]:
    """Expected state, optimizer state and window losses (``None`` when skipped) of each visible case (JSON data)."""
    out = {}
    for name, case in VISIBLE_CASES.items():
        result = expected_training(case)
        out[name] = {"state": tensors_to_json(result["state"]), "opt_state": tensors_to_json(result["opt_state"]),
                     "losses": [None if v is None else float(f"{v:.9g}") for v in result["losses"]]}
    return out


def window_costs() -> dict[str, dict[str, list[float]]]:
    """Per ``"num_params,bytes,world_size,K"``: both syncs' ``[all-reduces, bytes]`` (explorer grid and chapter)."""
    tiny = sum(p.numel() for p in TinyMLP().parameters())
    cases = list(itertools.product(acc.EXPLORER_PARAMS, acc.EXPLORER_BYTES, acc.EXPLORER_WORLD_SIZES,
                                   acc.EXPLORER_MICRO_BATCHES))
    cases += [(tiny, 4, CHAPTER_WORLD_SIZE, k) for k in CHAPTER_MICRO_BATCHES]
    return {",".join(map(str, case)): {"no_sync": list(window_allreduce_cost(*case, no_sync=True)),
                                       "every_micro_batch": list(window_allreduce_cost(*case, no_sync=False))}
            for case in cases}


STORED_ROUNDING = {acc.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {acc.STORED_REFERENCES: visible_references, acc.STORED_COSTS: window_costs}
