"""Comparisons the lessons' checks share, with failure messages that teach.

:func:`first_difference` names the first tensor that differs and by how much;
:func:`scale_between` and :func:`scale_hint` recognise "N times too big" mistakes;
:func:`assert_training_matches` and :func:`assert_same_on_all_ranks` are checks that more than
one lesson uses. They never print and never warn, so a passing check writes nothing to stdout
or stderr (nbgrader scores a test cell that writes to stderr 0). A lesson's own checks live in
its package (lesson 1's ``assert_*`` in :mod:`helpers.l01_replicated_training`).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

TensorDict = Mapping[str, "torch.Tensor | None"]


def _flat(d: TensorDict, names: Sequence[str]) -> torch.Tensor:
    parts = [d[n].detach().double().reshape(-1) for n in names if d.get(n) is not None]
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def scale_between(got: TensorDict, expected: TensorDict) -> float:
    """Least-squares factor ``s`` minimising ``|got - s * expected|`` over all shared tensors.

    ``nan`` when ``expected`` is all zeros. Used to recognise "N times too big" mistakes.
    """
    names = [n for n in expected if expected[n] is not None and got.get(n) is not None]
    g, e = _flat(got, names), _flat(expected, names)
    denom = float(e @ e)
    return float(g @ e) / denom if denom > 0 else math.nan


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute element difference between two same-shape tensors, in float64."""
    return float((a.detach().double() - b.detach().double()).abs().max()) if a.numel() else 0.0


def first_difference(
    a: TensorDict, b: TensorDict, atol: float = 0.0, rtol: float = 0.0
) -> str | None:
    """Describe the first tensor in which ``a`` and ``b`` differ, or ``None`` if none does.

    With ``atol == rtol == 0`` the comparison is exact (bit-identical values, same dtype).
    """
    if set(a) != set(b):
        missing, extra = sorted(set(b) - set(a)), sorted(set(a) - set(b))
        return f"different tensor names: missing {missing}, unexpected {extra}"
    for name in b:
        x, y = a[name], b[name]
        if x is None or y is None:
            if (x is None) != (y is None):
                return f"{name!r}: one is None, the other is a tensor"
            continue
        if x.shape != y.shape:
            return f"{name!r}: shape {tuple(x.shape)} vs {tuple(y.shape)}"
        if atol == 0.0 and rtol == 0.0:
            if x.dtype != y.dtype or not torch.equal(x, y):
                diff = max_abs_diff(x, y) if x.is_floating_point() or y.is_floating_point() else None
                where = (int((x.double() != y.double()).reshape(-1).nonzero()[0])
                         if x.dtype == y.dtype and x.numel() else 0)
                extra = f", max |diff| {diff:.3g}" if diff is not None else ""
                return f"{name!r} ({x.dtype}) differs, first at flat index {where}{extra}"
        elif not torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol):
            return f"{name!r}: max |diff| {max_abs_diff(x, y):.3g} (atol={atol:g}, rtol={rtol:g})"
    return None


def scale_hint(
    scale: float, world_size: int, what: str = "gradients", tol: float = 0.02,
    baseline: str = "the mean",
) -> str:
    """A sentence naming the classic mistake that a scale factor points to, or ''.

    ``tol`` is the relative window around each suspicious factor (N, 1/N, 1/N^2, N/2);
    use a loose one for trained parameters, whose updates compound nonlinearly.
    """
    if math.isnan(scale):
        return ""
    n = world_size

    def near(target: float) -> bool:
        return abs(scale - target) <= tol * abs(target)

    if abs(scale - 1.0) <= 0.02:
        return ""
    if near(float(n)):
        return (f" Your {what} are {n}x {baseline}: did you sum with all_reduce without "
                f"dividing by world_size={n}?")
    if near(1.0 / n):
        return (f" Your {what} are 1/{n} of {baseline}: did you divide by world_size={n} "
                f"twice (or average an already averaged value)?")
    if near(1.0 / (n * n)):
        return f" Your {what} are 1/{n * n} of {baseline}: did you divide by world_size**2?"
    if n != 2 and near(n / 2.0):
        return (f" Your {what} are {n}/2 of {baseline}: did you hard-code a divide by 2 "
                f"instead of dist.get_world_size(group)={n}?")
    if abs(scale) <= 0.02:
        return f" Your {what} are ~0: did you zero them or never copy the result back?"
    return f" (Your {what} are about {scale:.3g}x the expected ones.)"


def assert_same_on_all_ranks(per_rank: Sequence[TensorDict], what: str = "state") -> None:
    """Every rank's tensors are bit-identical to rank 0's; the message names rank and tensor."""
    for rank in range(1, len(per_rank)):
        diff = first_difference(per_rank[rank], per_rank[0])
        if diff is not None:
            raise AssertionError(
                f"Rank {rank}'s {what} differs from rank 0's: {diff}. Replicas must hold "
                f"bit-identical values after this call."
            )


def assert_training_matches(
    per_rank: Sequence[TensorDict],
    init: TensorDict,
    expected: TensorDict,
    world_size: int,
    reference: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Final replicated states equal on every rank and close to ``expected``.

    ``init`` is rank 0's initial state (what a broadcast from rank 0 starts everyone at),
    used to express a mismatch as a scale of the update ``final - init``.
    """
    for rank in range(1, len(per_rank)):
        diff = first_difference(per_rank[rank], per_rank[0], atol=atol, rtol=rtol)
        if diff is not None:
            raise AssertionError(
                f"After training, rank {rank}'s model differs from rank 0's ({diff}): the "
                f"replicas diverged. Did you broadcast the initial parameters and buffers "
                f"from rank 0 before the first step (each rank's model_fn() is seeded "
                f"differently), and average the gradients (not the loss) every step?"
            )
    got = per_rank[0]
    diff = first_difference(got, expected, atol=atol, rtol=rtol)
    if diff is None:
        return
    float_names = [n for n in expected if expected[n].is_floating_point()]
    got_update = {n: got[n].double() - init[n].double() for n in float_names}
    exp_update = {n: expected[n].double() - init[n].double() for n in float_names}
    hint = scale_hint(scale_between(got_update, exp_update), world_size, what="updates", tol=0.25,
                       baseline="the reference's")
    raise AssertionError(
        f"Rank 0's trained model does not match {reference}: {diff}.{hint}"
    )


def rounded(values: Any, digits: int) -> Any:
    """``values`` with every float rounded to ``digits`` decimals, nested lists and tuples kept (for messages)."""
    if isinstance(values, (list, tuple)):
        return type(values)(rounded(v, digits) for v in values)
    return round(values, digits) if isinstance(values, float) else values
