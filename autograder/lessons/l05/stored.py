"""Lesson 05's stored data: what chapter 05, its explorer and the visible tests read from ``helpers/stored``.

:data:`STORED` names each producer (``python -m autograder store`` writes its result);
:data:`STORED_ROUNDING` says which results hold float32 rounding. Units: bytes, sizes in
elements; 1 GB = 1e9 B as in the ZeRO paper.
"""
from __future__ import annotations

from typing import Any

import torch

from autograder.store import FLOAT32_RESULTS
from helpers import l05_optimizer_state_sharding as lesson
from helpers.shared.data import tensors_to_json
from helpers.shared.models import TinyLM, TinyMLP
from helpers.shared.state import SameInit, make_batches

from ..costs import adam_memory_bytes, ring_allreduce_bytes, ring_broadcast_bytes, zero_memory_parts
from .verdicts import GB, PLAIN, adam_reference


PAPER = dict(num_params=7_500_000_000, world_size=64, k=12)  # ZeRO paper, Figure 1
BUDGET_BYTES = 32 * GB
MEMORY_WORLD_SIZES = [2 ** e for e in range(11)]
EXPLORER_PARAMS = [1_300_000_000, 7_500_000_000, 13_000_000_000, 70_000_000_000, 128_000_000_000,
                   175_000_000_000, 1_000_000_000_000]
EXPLORER_K = [8, 12, 16]


def zero_memory_results() -> dict[str, Any]:
    """Chapter 05's memory numbers (bytes per rank): the paper's Figure 1, the stage curves, a 32 GB budget."""
    psi, k = PAPER["num_params"], PAPER["k"]
    first_fit = {str(s): next((n for n in range(1, 4097) if adam_memory_bytes(psi, n, s, k) <= BUDGET_BYTES), None)
                 for s in range(4)}
    return {
        "paper_figure_1": dict(PAPER, bytes_per_rank=[adam_memory_bytes(psi, PAPER["world_size"], s, k)
                                                      for s in range(4)]),
        "curves": {"num_params": psi, "k": k, "world_sizes": MEMORY_WORLD_SIZES, "stage1_floor": 4 * psi,
                   "bytes_per_rank": {str(s): [adam_memory_bytes(psi, n, s, k) for n in MEMORY_WORLD_SIZES]
                                      for s in range(4)}},
        "budget": {"bytes": BUDGET_BYTES, "searched_up_to": 4096, "first_fitting_world_size": first_fit},
    }


def memory_explorer_grid() -> dict[str, Any]:
    """``parts[psi][k][i][stage]`` = (parameter, gradient, optimizer-state) bytes per rank at world size ``i``."""
    return {
        "num_params": EXPLORER_PARAMS, "k": EXPLORER_K, "world_sizes": MEMORY_WORLD_SIZES,
        "stage1_floor": {str(psi): 4 * psi for psi in EXPLORER_PARAMS},
        "parts": {str(psi): {str(k): [[list(zero_memory_parts(psi, n, s, k)) for s in range(4)]
                                      for n in MEMORY_WORLD_SIZES] for k in EXPLORER_K} for psi in EXPLORER_PARAMS},
    }


def tinylm_communication() -> dict[str, Any]:
    """Ring bytes per rank of one fp32 broadcast and one all-reduce of every TinyLM parameter, N = 1..4."""
    with torch.device("meta"):  # only the sizes: no memory, no draw from the global RNG
        num_params = sum(p.numel() for p in TinyLM().parameters())  # the tied embedding/head counts once
    world_sizes = [1, 2, 3, 4]
    return {"num_params": num_params, "world_sizes": world_sizes,
            "broadcast": [ring_broadcast_bytes(num_params, 4, n) for n in world_sizes],
            "all_reduce": [ring_allreduce_bytes(num_params, 4, n) for n in world_sizes]}


VISIBLE_ADAM = {  # visible test: (model_fn, batches, hyper-parameters); its expected values are stored
    "test_sharded_adam_matches_adam": (SameInit(TinyMLP, seed=5), (3, 12, 8, 4, 7), PLAIN),
    "test_consolidated_state_dict": (SameInit(TinyMLP, seed=83), (2, 12, 8, 4, 89), PLAIN),
    "test_flat_adam_matches_adam": (SameInit(TinyMLP, seed=139), (3, 12, 8, 4, 149),
                                    dict(PLAIN, weight_decay=0.01, max_norm=0.4)),
}


def visible_references() -> dict[str, Any]:
    """float64 single-process Adam after the visible tests' steps: parameters, moments, steps."""
    out = {}
    for case, (model_fn, batch_args, hyper) in VISIBLE_ADAM.items():
        params, moments = adam_reference(model_fn(), make_batches(*batch_args), hyper)
        out[case] = {"params": tensors_to_json(params),
                     "moments": tensors_to_json({f"{n}.{key}": t for n, (m, v, _) in moments.items()
                                                 for key, t in (("exp_avg", m), ("exp_avg_sq", v))}),
                     "steps": {n: step for n, (_, _, step) in moments.items()}}
    return out


STORED_ROUNDING = {lesson.STORED_REFERENCES: FLOAT32_RESULTS}  # float32 values: their last digits differ between CPUs
STORED = {
    lesson.STORED_MEMORY: zero_memory_results,
    lesson.STORED_EXPLORER: memory_explorer_grid,
    lesson.STORED_REFERENCES: visible_references,
    "05_tinylm_communication": tinylm_communication,
}
