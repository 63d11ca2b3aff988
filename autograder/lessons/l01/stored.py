"""Lesson 01, replicated training: the results chapter 01, its explorer and the visible tests read from
``helpers/stored`` (:data:`STORED`; byte counts in bytes sent per rank by a ring all-reduce).
"""
from __future__ import annotations

from typing import Any

import torch

from autograder.store import FLOAT32_RESULTS
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyMLP
from helpers.shared.state import PerRankInit, make_batches

from ..costs import ring_allreduce_bytes
from .verdicts import sgd_reference

RING_MESSAGE = 1200  # elements all-reduced by the chapter's hand-written ring
FIGURE_MODELS = (125_000_000, 1_300_000_000, 7_000_000_000)  # parameters
EXPLORER_WORLD_SIZES = [2 ** k for k in range(1, 11)]
EXPLORER_PARAMS = sorted({m * 10 ** e for e in range(5, 12) for m in (1, 2, 5)} | {10 ** 12, *FIGURE_MODELS})
EXPLORER_BYTES_PER_ELEMENT = (1, 2, 4, 8)


def ring_allreduce_results() -> dict[str, Any]:
    """Chapter 01's ring all-reduce bytes per rank: its measured tables and its figure (4-byte elements)."""
    with torch.device("meta"):  # only the sizes: no memory, no draw from the global RNG
        tiny_mlp = sum(p.numel() for p in TinyMLP().parameters())
    world_sizes = sorted({3, *EXPLORER_WORLD_SIZES})  # N = 3 too: the chapter measures 2, 3 and 4 ranks
    return {
        "bytes_per_element": 4,
        "tables": {str(n): {str(w): ring_allreduce_bytes(n, 4, w) for w in (1, 2, 3, 4)}
                   for n in (RING_MESSAGE, tiny_mlp)},
        "figure": {"world_sizes": world_sizes, "bytes_per_element": 4,
                   "bytes_per_rank": {str(m): [ring_allreduce_bytes(m, 4, w) for w in world_sizes]
                                      for m in FIGURE_MODELS}},
    }


def allreduce_explorer_grid() -> dict[str, Any]:
    """Bytes per rank of a ring all-reduce at every slider position of lesson 1's ``allreduce_explorer``.

    ``bytes_per_rank[bytes_per_element][num_params][i]`` is for ``world_sizes[i]``.
    """
    return {
        "world_sizes": EXPLORER_WORLD_SIZES, "num_params": EXPLORER_PARAMS,
        "bytes_per_element": list(EXPLORER_BYTES_PER_ELEMENT),
        "bytes_per_rank": {str(b): {str(m): [ring_allreduce_bytes(m, b, w) for w in EXPLORER_WORLD_SIZES]
                                    for m in EXPLORER_PARAMS} for b in EXPLORER_BYTES_PER_ELEMENT},
    }


def train_replicated_visible() -> dict[str, Any]:
    """The visible training test of the design exercise: float64 full-batch SGD from rank 0's TinyMLP, 3 steps."""
    model = PerRankInit(TinyMLP, seed=100).for_rank(0)
    batches = make_batches(num_steps=3, batch_size=8, in_features=8, out_features=4, seed=200)
    return tensors_to_json(sgd_reference(model, batches, lr=0.1))


# float32 values: their last digits differ between CPUs
STORED_ROUNDING = {"01_train_replicated_visible": FLOAT32_RESULTS}
STORED = {
    "01_ring_allreduce": ring_allreduce_results,
    "01_allreduce_explorer": allreduce_explorer_grid,
    "01_train_replicated_visible": train_replicated_visible,
}
