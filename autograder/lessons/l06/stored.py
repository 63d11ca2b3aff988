"""Lesson 06's stored data: the results chapter 06 reads from ``helpers/stored`` (``STORED``)."""
from __future__ import annotations

from typing import Any

from autograder.lessons.costs import (adam_memory_bytes, ring_allgather_bytes, ring_allreduce_bytes,
                                      ring_reduce_scatter_bytes)
from helpers.shared.models import TinyMLP

from .verdicts import owned_range, shard_size


def stored_layouts() -> dict[str, Any]:
    """§6.1: TinyMLP's flat gradient on 2, 3, 4, 5 and 7 ranks: S, padding and owned ranges."""
    numel = sum(p.numel() for p in TinyMLP().parameters())
    layouts = [{"world_size": n, "shard_size": shard_size(numel, n), "padding": n * shard_size(numel, n) - numel,
                "ranges": [owned_range(numel, n, r) for r in range(n)]} for n in (2, 3, 4, 5, 7)]
    return {"num_params": numel, "layouts": layouts}


WORLD_SIZES = [2 ** e for e in range(11)]


def stored_stage_memory() -> dict[str, Any]:
    """§6.4: bytes per rank of ZeRO stages 0-3 for the ZeRO paper's Ψ = 7.5 B, K = 12, N = 1 ... 1024."""
    psi, k = 7_500_000_000, 12
    return {"num_params": psi, "k": k, "world_sizes": WORLD_SIZES,
            "stage_bytes": [[adam_memory_bytes(psi, n, stage, k) for n in WORLD_SIZES] for stage in range(4)]}


EXPLORER_PARAMS = sorted({m * 10 ** e for e in range(6, 12) for m in (1, 2, 5)} | {7_500_000_000, 10 ** 12})
EXPLORER_KS = [0, 4, 8, 12, 16, 20, 24]


def stored_explorer() -> dict[str, Any]:
    """§6.6: stage 0-2 bytes per rank and fp16 ring traffic per step on a grid of Ψ, N and K."""
    def traffic(psi: int, n: int) -> dict[str, float]:
        return {"reduce_scatter_bytes": ring_reduce_scatter_bytes(psi, 2, n),
                "all_gather_bytes": ring_allgather_bytes(psi, 2, n),
                "all_reduce_bytes": ring_allreduce_bytes(psi, 2, n)}

    return {"num_params": EXPLORER_PARAMS, "world_sizes": WORLD_SIZES, "ks": EXPLORER_KS,
            "stage_bytes": [[[[adam_memory_bytes(psi, n, stage, k) for n in WORLD_SIZES] for stage in range(3)]
                             for k in EXPLORER_KS] for psi in EXPLORER_PARAMS],
            "traffic_bytes": [[traffic(psi, n) for n in WORLD_SIZES] for psi in EXPLORER_PARAMS]}


# Only IEEE +, -, *, / on Python numbers: the stored values are the same on every machine.
STORED = {"06_layouts": stored_layouts, "06_stage_memory": stored_stage_memory, "06_explorer": stored_explorer}
