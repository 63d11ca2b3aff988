"""Deterministic token batches with padding masks, uneven lengths and empty ranks.

A micro-batch is a :class:`TokenBatch`: ``tokens`` and ``targets`` are ``[batch, time]``
LongTensors, ``mask`` is a ``[batch, time]`` BoolTensor that is True on valid (non-pad)
target positions. Padding uses token id ``PAD`` and never counts.

Named tensors (a model state, gradients) travel to and from the course's stored results
(``helpers.shared.stored``) as JSON data with :func:`tensors_to_json` and :func:`tensors_from_json`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

PAD = 0


@dataclass
class TokenBatch:
    tokens: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor

    @property
    def num_valid(self) -> int:
        """Number of valid target tokens (elements)."""
        return int(self.mask.sum())


def token_batch(lengths: list[int], max_len: int, vocab_size: int = 32, seed: int = 0) -> TokenBatch:
    """One padded batch: sequence ``i`` has ``lengths[i]`` valid targets (0 allowed)."""
    if any(not 0 <= n <= max_len for n in lengths):
        raise ValueError(f"every length must be within [0, {max_len}], got {lengths}")
    g = torch.Generator().manual_seed(seed)
    rows = len(lengths)
    tokens = torch.randint(1, vocab_size, (rows, max_len), generator=g)
    targets = torch.randint(1, vocab_size, (rows, max_len), generator=g)
    mask = torch.arange(max_len).expand(rows, max_len) < torch.tensor(lengths).unsqueeze(1)
    tokens = torch.where(mask, tokens, torch.full_like(tokens, PAD))
    targets = torch.where(mask, targets, torch.full_like(targets, PAD))
    return TokenBatch(tokens, targets, mask)


def uneven_window(
    world_size: int,
    micro_batches: int,
    rows: int = 2,
    max_len: int = 8,
    vocab_size: int = 32,
    empty_ranks: tuple[int, ...] = (),
    seed: int = 0,
) -> list[list[TokenBatch]]:
    """``window[rank][k]``: rank ``rank``'s micro-batch ``k`` of one accumulation window.

    Lengths vary per sequence, per micro-batch and per rank; ranks in ``empty_ranks``
    get micro-batches whose masks are all False (zero valid tokens). Deterministic in
    ``seed``, so every rank (and a single-process reference) can rebuild the same window.
    """
    g = torch.Generator().manual_seed(seed)
    window = []
    for rank in range(world_size):
        per_rank = []
        for k in range(micro_batches):
            if rank in empty_ranks:
                lengths = [0] * rows
            else:
                lengths = torch.randint(0, max_len + 1, (rows,), generator=g).tolist()
            per_rank.append(token_batch(lengths, max_len, vocab_size, seed=seed * 1000 + rank * 100 + k))
        window.append(per_rank)
    return window


def tensors_to_json(tensors: Mapping[str, torch.Tensor], digits: int = 9) -> dict[str, Any]:
    """JSON data ``{name: {"dtype", "shape", "values"}}`` of named tensors (values flattened).

    Floats are rounded to ``digits`` significant digits, and values below ``1e-12`` of the
    tensor's largest magnitude are stored as 0 (rounding noise where the exact value is 0, e.g.
    the gradient of an attention key bias), so that a stored float64 result does not depend on
    last-bit differences between machines' math libraries or thread counts.
    """
    out = {}
    for name, t in tensors.items():
        values = t.detach().reshape(-1).tolist()
        if t.is_floating_point():
            floor = 1e-12 * max((abs(v) for v in values), default=0.0)
            values = [0.0 if abs(v) < floor else float(f"{v:.{digits}g}") for v in values]
        out[name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "values": values}
    return out


def tensors_from_json(data: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The named tensors that :func:`tensors_to_json` wrote."""
    return {name: torch.tensor(d["values"], dtype=getattr(torch, d["dtype"])).reshape(d["shape"])
            for name, d in data.items()}
