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


class _Block(nn.Module):
    """Pre-norm causal self-attention + MLP block (nanoGPT style, tiny)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    """A two-layer causal transformer language model whose output layer is tied to its embedding.

    ``forward(tokens)`` takes a ``[batch, time]`` LongTensor and returns logits of
    shape ``[batch, time, vocab_size]``. The tie (``head.weight is embed.weight``) is
    the shared parameter that lesson 07's sharding must keep in one unit.
    """

    def __init__(self, vocab_size: int = 32, dim: int = 16, layers: int = 2, heads: int = 2, max_len: int = 16) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class OutOfOrderMLP(nn.Module):
    """An MLP whose layers are registered in a different order than forward uses them.

    ``head`` is registered first but runs last, so backward produces its gradients
    first: the gradient-ready order is not the reverse registration order, and DDP's
    bucket rebuild (which follows the recorded ready order) differs from its first guess.
    """

    def __init__(self, in_features: int = 6, hidden: int = 10, out_features: int = 3) -> None:
        super().__init__()
        self.head = nn.Linear(hidden, out_features)
        self.body = nn.Linear(in_features, hidden)
        self.mid = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(torch.relu(self.body(x)))))
