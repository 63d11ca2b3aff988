"""Lesson 03, gradient buckets: the results stored for the chapter (``STORED``).

The buckets of the chapter's two small models, the 24-layer synthetic model's buckets, timelines and
tail against the cap (sections 3.2 and 3.4), and the grid of the explorer of optional section 3.E,
all computed with the references of :mod:`autograder.lessons.l03.verdicts`.
"""
from __future__ import annotations

import itertools
from typing import Any, Sequence

import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.l03.verdicts import (allreduce_seconds, assign_buckets, communication_schedule,
                                             communication_tail, torch_bucket_assignment, walk)
from helpers.l03_gradient_buckets import MB, grad_bytes
from helpers.shared.models import OutOfOrderMLP, TinyMLP, make_regression_batch
from helpers.shared.state import mse

# --------------------------------------------------------------------------- results stored for the chapter


CHAPTER_MODELS = {"TinyMLP": (TinyMLP, 8, 4, 160, 128), "OutOfOrderMLP": (OutOfOrderMLP, 6, 3, 256, 128)}
CHAPTER_NETWORK = {"world_size": 8, "alpha_s": 100e-6, "beta_s_per_byte": 1e-10}  # 10 GB/s links
SYNTHETIC_MODEL = {"num_layers": 24, "weight_bytes": 8 * MB, "bias_bytes": 8 * 1024, "layer_backward_s": 3e-3}


def ready_order(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[int]:
    """The order in which one backward of ``model`` produces its gradients (indices, one process)."""
    order: list[int] = []
    for i, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda _, i=i: order.append(i))
    mse(model(x), y).backward()
    return order


def stored_assignments() -> dict[str, Any]:
    """The chapter's two small models: sizes, ready order, and PyTorch's buckets for the guess and the truth."""
    out = {}
    for name, (model_cls, in_f, out_f, cap, first) in CHAPTER_MODELS.items():
        model = model_cls()
        sizes = grad_bytes(model)
        order = ready_order(model, *make_regression_batch(8, in_f, out_f, seed=0))
        out[name] = {"names": [n for n, _ in model.named_parameters()], "param_bytes": sizes,
                     "bucket_cap_bytes": cap, "first_bucket_cap_bytes": first, "ready_order": order,
                     "guess": torch_bucket_assignment(sizes, cap, first),
                     "on_ready_order": torch_bucket_assignment(sizes, cap, first, order)}
    return out


def tail_by_cap(grad_ready_s: Sequence[float], param_bytes: Sequence[int], world_size: int, alpha_s: float,
                beta_s_per_byte: float, caps: Sequence[int], first_bucket_cap_bytes: int | None) -> list[list]:
    """``[cap_bytes, tail_s, num_buckets]`` for each cap, with DDP's assignment in reverse registration order."""
    rows = []
    for cap in caps:
        bucket_list = assign_buckets(param_bytes, cap, first_bucket_cap_bytes)
        tail = communication_tail(grad_ready_s, param_bytes, bucket_list, world_size, alpha_s, beta_s_per_byte)
        rows.append([cap, tail, len(bucket_list)])
    return rows


def _extreme_tails(grad_ready_s: Sequence[float], param_bytes: Sequence[int], network: dict[str, float]
                   ) -> dict[str, float]:
    """Tails of one bucket per tensor and of a single bucket (seconds)."""
    order = walk(len(param_bytes), None)
    args = (network["world_size"], network["alpha_s"], network["beta_s_per_byte"])
    return {"per_tensor_tail_s": communication_tail(grad_ready_s, param_bytes, [[i] for i in order], *args),
            "one_bucket_tail_s": communication_tail(grad_ready_s, param_bytes, [order], *args)}


def stored_synthetic() -> dict[str, Any]:
    """§3.2 and §3.4: the 24-layer synthetic model's buckets, timelines and tail against the cap."""
    # imports matplotlib: not at module level, grading imports this module with the package
    from helpers.l03_gradient_buckets.plots import synthetic_layers
    model = SYNTHETIC_MODEL
    sizes, ready = synthetic_layers(**model)
    net = CHAPTER_NETWORK
    args = (net["world_size"], net["alpha_s"], net["beta_s_per_byte"])
    first, total = dist._DEFAULT_FIRST_BUCKET_BYTES, sum(sizes)
    cases = []
    for label, cap, first_cap in (("one bucket per tensor", 1, None),
                                  ("DDP defaults (25 MiB, first 1 MiB)", 25 * MB, first),
                                  ("one bucket", total, None)):
        bucket_list = assign_buckets(sizes, cap, first_cap)
        cases.append({"label": label, "buckets": bucket_list,
                      "schedule": communication_schedule(ready, sizes, bucket_list, *args),
                      "tail_s": communication_tail(ready, sizes, bucket_list, *args)})
    lo, hi = max(1, min(sizes) // 4), total
    caps = sorted({int(round(lo * (hi / lo) ** (k / 96))) for k in range(97)} | {25 * MB})
    return {"model": model, "network": net, "cases": cases,
            "layer_allreduce_s": allreduce_seconds(model["weight_bytes"] + model["bias_bytes"], *args),
            "gradient_allreduce_s": allreduce_seconds(total, *args),
            "sweep": {"first_bucket_cap_bytes": MB, "rows": tail_by_cap(ready, sizes, *args, caps, MB),
                      **_extreme_tails(ready, sizes, net)}}


EXPLORER_GRID = {
    "caps_bytes": sorted({int(round(2 ** (k / 2))) for k in range(24, 57)} | {25 * MB}),
    "first_caps_bytes": [256 * 1024, MB, 4 * MB, 25 * MB],
    "world_sizes": [2, 8, 64],
    "alphas_s": [1e-5, 1e-4, 1e-3],
    "bandwidths_gb_s": [1, 10, 100],
}


def stored_explorer() -> dict[str, Any]:
    """The explorer of optional section 3.E: tail and first start for every cap, first cap and network of
    :data:`EXPLORER_GRID` (seconds)."""
    from helpers.l03_gradient_buckets.plots import synthetic_layers
    model = SYNTHETIC_MODEL
    sizes, ready = synthetic_layers(**model)
    grid = EXPLORER_GRID
    assignments = [[assign_buckets(sizes, cap, first) for cap in grid["caps_bytes"]]
                   for first in grid["first_caps_bytes"]]
    networks = []
    for n, alpha, bw in itertools.product(grid["world_sizes"], grid["alphas_s"], grid["bandwidths_gb_s"]):
        net = {"world_size": n, "alpha_s": alpha, "beta_s_per_byte": 1 / (bw * 1e9)}
        schedules = [[communication_schedule(ready, sizes, b, n, alpha, net["beta_s_per_byte"]) for b in row]
                     for row in assignments]
        networks.append({"world_size": n, "alpha_s": alpha, "bandwidth_gb_s": bw,
                         "tail_s": [[s[-1][2] - max(ready) for s in row] for row in schedules],
                         "first_start_s": [[s[0][1] for s in row] for row in schedules],
                         **_extreme_tails(ready, sizes, net)})
    return {"model": model, **grid, "num_buckets": [[len(b) for b in row] for row in assignments],
            "networks": networks}


# Only IEEE +, -, *, / and max on Python floats: the stored values are the same on every machine.
STORED = {"03_assignments": stored_assignments, "03_synthetic": stored_synthetic, "03_explorer": stored_explorer}
