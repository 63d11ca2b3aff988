"""Tiny deterministic models used by the chapters, exercises and hidden tests."""
from __future__ import annotations

import torch
from torch import nn


class TinyMLP(nn.Module):
    """A two-layer MLP with a LayerNorm and one buffer.

    The ``step_count`` buffer exists so that exercises can check that buffers,
    not only parameters, are synchronised. ``hidden`` and ``out_features`` are in
    elements.
    """

    def __init__(self, in_features: int = 8, hidden: int = 16, out_features: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, out_features)
        self.register_buffer("step_count", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.norm(self.fc1(x))))


class BatchNormMLP(nn.Module):
    """An MLP with BatchNorm: running_mean / running_var are real buffers."""

    def __init__(self, in_features: int = 6, hidden: int = 12, out_features: int = 3) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def make_regression_batch(
    num_samples: int, in_features: int = 8, out_features: int = 4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic regression batch ``(x, y)`` of ``num_samples`` rows."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(num_samples, in_features, generator=g)
    y = torch.randn(num_samples, out_features, generator=g)
    return x, y


def shard_batch(
    x: torch.Tensor, y: torch.Tensor, rank: int, world_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s contiguous, equal shard of a batch (``len(x) % world_size == 0``)."""
    if len(x) % world_size:
        raise ValueError(f"batch of {len(x)} rows does not split into {world_size} equal shards")
    per_rank = len(x) // world_size
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    return x[rows], y[rows]
