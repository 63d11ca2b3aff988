"""Student-facing checks whose failure messages teach.

Every ``assert_*`` function raises :class:`AssertionError` with a message that says what
was expected, what was found and, where a common mistake explains the numbers, which
mistake it probably is ("your gradients are 3x the mean: did you sum without dividing by
world_size=3?"). They never print and never warn, so a passing check writes nothing to
stdout or stderr (nbgrader scores a test cell that writes to stderr 0).

All functions run in the notebook process on tensors returned by ``helpers.cluster.run``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import torch

TensorDict = Mapping[str, "torch.Tensor | None"]


# --------------------------------------------------------------------------- small utilities


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


def _scale_hint(
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


# --------------------------------------------------------------------------- cross-rank checks


def assert_same_on_all_ranks(per_rank: Sequence[TensorDict], what: str = "state") -> None:
    """Every rank's tensors are bit-identical to rank 0's; the message names rank and tensor."""
    for rank in range(1, len(per_rank)):
        diff = first_difference(per_rank[rank], per_rank[0])
        if diff is not None:
            raise AssertionError(
                f"Rank {rank}'s {what} differs from rank 0's: {diff}. Replicas must hold "
                f"bit-identical values after this call."
            )


def assert_all_ranks_return(results: Sequence[object], expected: bool, case: str) -> None:
    """Every rank returned the Python bool ``expected`` (for ``replicas_aligned``)."""
    for rank, r in enumerate(results):
        if type(r) is not bool:
            raise AssertionError(
                f"[{case}] rank {rank} returned {r!r} of type {type(r).__name__}; return a "
                f"Python bool (e.g. bool(flag.item())), the same on every rank."
            )
    if len(set(results)) != 1:
        raise AssertionError(
            f"[{case}] ranks disagree: returned {list(results)} (index = rank). Every rank "
            f"must return the same answer; a rank cannot judge alignment from its own view "
            f"alone, so combine the local verdicts with a collective."
        )
    if results[0] is not expected:
        hint = (" Check every parameter AND every buffer (integer ones too), element by "
                "element: a sum-style checksum misses swapped elements."
                if expected is False else
                " Did your check modify the model or compare tensors that legitimately "
                "differ (e.g. gradients)?")
        raise AssertionError(
            f"[{case}] every rank returned {results[0]}, expected {expected}.{hint}"
        )


# --------------------------------------------------------------------------- gradients


def assert_gradients_averaged(
    got_per_rank: Sequence[TensorDict],
    expected: TensorDict,
    world_size: int,
    local_per_rank: Sequence[TensorDict] | None = None,
    atol: float = 1e-6,
    rtol: float = 1e-4,
) -> None:
    """After ``average_gradients``, every rank holds ``expected`` (the mean over ranks).

    ``expected`` maps parameter names to float64 tensors, or ``None`` for parameters that
    must keep ``grad=None``. ``local_per_rank`` (each rank's gradient before averaging)
    lets the message recognise a call that changed nothing.
    """
    for rank, got in enumerate(got_per_rank):
        for name, e in expected.items():
            g = got.get(name)
            if e is None and g is not None:
                raise AssertionError(
                    f"Rank {rank}: parameter {name!r} had grad=None (frozen, or unused by the forward) "
                    f"but has a gradient after your call. Skip parameters whose .grad is None."
                )
            if e is not None and g is None:
                raise AssertionError(f"Rank {rank}: parameter {name!r} lost its gradient.")
            if e is not None and g.shape != e.shape:
                raise AssertionError(
                    f"Rank {rank}: {name!r}.grad has shape {tuple(g.shape)}, expected "
                    f"{tuple(e.shape)}. Reduce each gradient in place; do not reshape it."
                )
    if local_per_rank is not None:
        unchanged = all(
            first_difference(
                {n: got_per_rank[r][n] for n in expected if expected[n] is not None},
                {n: local_per_rank[r][n] for n in expected if expected[n] is not None},
                atol=atol, rtol=rtol,
            ) is None
            for r in range(len(got_per_rank))
        )
        if unchanged:
            raise AssertionError(
                "Every rank still holds its own local gradient: average_gradients did not "
                "change .grad. Averaging the loss value does not average gradients; "
                "all_reduce each parameter's .grad in place."
            )
    for rank in range(1, len(got_per_rank)):
        diff = first_difference(got_per_rank[rank], got_per_rank[0], atol=atol, rtol=rtol)
        if diff is not None:
            raise AssertionError(
                f"After averaging, rank {rank}'s gradients differ from rank 0's: {diff}. "
                f"Every rank must end with the same (mean) gradient."
            )
    for rank, got in enumerate(got_per_rank):
        diff = first_difference(
            {n: got[n] for n in expected if expected[n] is not None},
            {n: v for n, v in expected.items() if v is not None},
            atol=atol, rtol=rtol,
        )
        if diff is not None:
            hint = _scale_hint(scale_between(got, expected), world_size)
            raise AssertionError(
                f"Rank {rank}'s gradients are not the mean over {world_size} ranks: {diff}.{hint}"
            )


# --------------------------------------------------------------------------- parameters and training


def assert_states_close(
    got: TensorDict, expected: TensorDict, atol: float, rtol: float, what: str
) -> None:
    """``got`` matches ``expected`` tensor by tensor within tolerances (names must match)."""
    diff = first_difference(got, expected, atol=atol, rtol=rtol)
    if diff is not None:
        raise AssertionError(f"{what}: {diff}")


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
    hint = _scale_hint(scale_between(got_update, exp_update), world_size, what="updates", tol=0.25,
                       baseline="the reference's")
    raise AssertionError(
        f"Rank 0's trained model does not match {reference}: {diff}.{hint}"
    )


def assert_broadcast_from(per_rank: Sequence[Mapping[str, object]], src: int) -> None:
    """Check per-rank results of ``reference.broadcast_on_rank``: all ranks now hold rank
    ``src``'s pre-call state, bit for bit, with their parameter objects kept."""
    expected = per_rank[src]["before"]
    for rank, o in enumerate(per_rank):
        assert_parameter_identity(o["ids_before"], o["ids_after"], o["optimizer_moved"])
        diff = first_difference(o["after"], expected)
        if diff is None:
            continue
        buffers = set(o["buffers"])
        params_after = {n: t for n, t in o["after"].items() if n not in buffers}
        params_src = {n: t for n, t in expected.items() if n not in buffers}
        if src != 0 and first_difference(o["after"], per_rank[0]["before"]) is None:
            hint = f" Rank {rank} now holds rank 0's values: broadcast from src={src}, not from 0."
        elif first_difference(o["after"], o["before"]) is None:
            hint = f" Rank {rank}'s model did not change at all."
        elif buffers and first_difference(params_after, params_src) is None:
            hint = (" The parameters match but a buffer does not: broadcast model.buffers() too "
                    "(BatchNorm running statistics, integer counters).")
        else:
            hint = ""
        raise AssertionError(
            f"broadcast_parameters(model, src={src}): afterwards rank {rank} should hold rank "
            f"{src}'s parameters and buffers, but {diff}.{hint}"
        )


def assert_parameter_identity(
    ids_before: Sequence[int], ids_after: Sequence[int], optimizer_moved: bool
) -> None:
    """Parameters are the same Python objects after the call and an earlier optimizer still works."""
    if list(ids_before) != list(ids_after):
        changed = [i for i, (a, b) in enumerate(zip(ids_before, ids_after)) if a != b]
        raise AssertionError(
            f"Parameter objects were replaced (positions {changed} in model.parameters()). "
            f"An optimizer built before the call still holds the old ones and would update "
            f"tensors the model no longer uses. Broadcast into the existing tensors "
            f"(dist.broadcast(p.data, ...)) instead of assigning new nn.Parameters."
        )
    if not optimizer_moved:
        raise AssertionError(
            "An optimizer built before your call no longer updates the model's parameters."
        )


# --------------------------------------------------------------------------- calculations


def assert_ring_allreduce_bytes(
    fn: Callable[[int, int, int], float],
    expected: Mapping[tuple[int, int, int], float],
) -> None:
    """``fn(num_elements, bytes_per_element, N)`` equals ``expected[(num_elements, bytes_per_element, N)]``.

    The expected values (bytes each rank sends) are written in the test, or come from the
    instructor's calculator in hidden tests. A mismatch names the classic mistake it looks like.
    """
    for (n, b, w), exp in expected.items():
        got = fn(n, b, w)
        if not isinstance(got, (int, float)) or isinstance(got, bool):
            raise AssertionError(f"ring_allreduce_bytes{(n, b, w)} returned {got!r}; return a number.")
        if math.isclose(got, exp, rel_tol=1e-9, abs_tol=1e-9):
            continue
        message = n * b
        hint = ""
        if w > 1 and math.isclose(got, (w - 1) / w * message, rel_tol=1e-9):
            hint = (" That is (N-1)/N x bytes: one reduce-scatter only. An all-reduce is a "
                    "reduce-scatter followed by an all-gather, each (N-1)/N x bytes.")
        elif w > 1 and math.isclose(got, 2 * (w - 1) * message, rel_tol=1e-9):
            hint = (" That is 2(N-1) x bytes: each of the 2(N-1) ring steps sends one "
                    "chunk of bytes/N, not the whole message.")
        elif math.isclose(got, 2 * message, rel_tol=1e-9):
            hint = " That is 2 x bytes: the volume is 2(N-1)/N x bytes, which is < 2 x bytes."
        elif math.isclose(got, exp * 8, rel_tol=1e-9) or math.isclose(got, exp / 8, rel_tol=1e-9):
            hint = " Off by a factor of 8: bytes, not bits."
        raise AssertionError(
            f"ring_allreduce_bytes(num_elements={n}, bytes_per_element={b}, world_size={w}) "
            f"returned {got!r}, expected {exp!r}.{hint}"
        )


def rounded(values: Any, digits: int) -> Any:
    """``values`` with every float rounded to ``digits`` decimals, nested lists and tuples kept (for messages)."""
    if isinstance(values, (list, tuple)):
        return type(values)(rounded(v, digits) for v in values)
    return round(values, digits) if isinstance(values, float) else values
