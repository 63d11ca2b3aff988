"""Lesson 06, gradient sharding (ZeRO stage 2): references, rank-side drivers, checks, figures.

Layout used throughout: a flat gradient of ``numel`` elements is padded with zeros to
``N * S`` elements, ``S = ceil(numel / N)``; rank ``r`` (its rank in the group) owns
elements ``[r*S, (r+1)*S)`` of the padded vector, of which
``[min(r*S, numel), min((r+1)*S, numel))`` are real gradient entries and the rest padding.

Three kinds of functions live here:

* single-process **references** (float64): owned slices, the clipped gradient computed by
  ``torch.nn.utils.clip_grad_norm_``;
* **rank-side drivers** (``*_on_rank``) that run inside :func:`helpers.cluster.run`, call a
  student's function the way its contract says and return plain tensors;
* **checks** (``assert_*``) whose messages name the classic mistakes, and the chapter's
  figure and explorer.

All byte counts are bytes (1 GB = 1e9 B); norms are Euclidean 2-norms of gradient values.
"""
from __future__ import annotations

import io
import math
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from torch import nn

from helpers.costs import adam_memory_bytes, ring_allgather_bytes, ring_allreduce_bytes, ring_reduce_scatter_bytes
from helpers.models import shard_batch

REDUCE_SCATTER_OPS = ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter")
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s epsilon in max_norm / (total_norm + eps)


# --------------------------------------------------------------------------- layout arithmetic


def shard_size(numel: int, world_size: int) -> int:
    """Elements per owner slice, ``S = ceil(numel / world_size)`` (padding included)."""
    if numel < 0 or world_size < 1:
        raise ValueError("numel must be >= 0 and world_size >= 1")
    return -(-numel // world_size)


def padded_numel(numel: int, world_size: int) -> int:
    """Length of the zero-padded flat gradient, ``N * S`` elements."""
    return world_size * shard_size(numel, world_size)


def owned_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)``: the real (unpadded) elements rank ``rank`` owns; may be empty."""
    s = shard_size(numel, world_size)
    return min(rank * s, numel), min((rank + 1) * s, numel)


def pad_flat(flat: torch.Tensor, world_size: int) -> torch.Tensor:
    """A copy of the 1-D ``flat`` with zeros appended up to :func:`padded_numel` elements."""
    extra = padded_numel(flat.numel(), world_size) - flat.numel()
    return torch.cat([flat, flat.new_zeros(extra)])


# --------------------------------------------------------------------------- synthetic data and references


def synthetic_flat_grad(numel: int, rank: int, seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank ``rank``'s deterministic flat "gradient" of ``numel`` elements.

    ``(rank + 1) * base + noise_rank``: a shared part and a rank-specific part, so the sum
    over ranks is neither one rank's vector nor a multiple of one. Rebuildable anywhere.
    """
    base = torch.randn(numel, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    noise = torch.randn(numel, generator=torch.Generator().manual_seed(seed + 7919 * (rank + 1)),
                        dtype=torch.float64)
    return ((rank + 1) * base + noise).to(dtype)


def random_shards(sizes_per_rank: Sequence[Sequence[int]], seed: int) -> list[list[torch.Tensor]]:
    """``shards[g][k]``: float32 shard ``k`` of group rank ``g`` with ``sizes_per_rank[g][k]`` elements.

    Rank ``g``'s values are scaled by ``g + 1``, so the local norms differ from rank to
    rank and a wrong combination of them cannot pass by coincidence.
    """
    gen = torch.Generator().manual_seed(seed)
    return [[(g + 1) * torch.randn(size, generator=gen) for size in sizes]
            for g, sizes in enumerate(sizes_per_rank)]


def expected_owned_slices(
    per_rank: Sequence[torch.Tensor], denominator: float | None = None
) -> list[torch.Tensor]:
    """float64 owner slices (index = group rank) of ``sum_r per_rank[r] / denominator``.

    ``denominator`` defaults to the number of ranks. Each slice has ``S`` elements; the
    padding positions are 0.
    """
    n = len(per_rank)
    total = pad_flat(torch.stack([g.double() for g in per_rank]).sum(0), n)
    return list((total / (n if denominator is None else denominator)).chunk(n))


def clip_reference(shards_per_rank: Sequence[Sequence[torch.Tensor]], max_norm: float
                   ) -> tuple[float, list[list[torch.Tensor]]]:
    """Global norm and clipped shards from ``torch.nn.utils.clip_grad_norm_`` (float64).

    All ranks' shards together are the full gradient; clipping it in one process is the
    reference the sharded version must reproduce.
    """
    params = [[nn.Parameter(torch.zeros_like(s, dtype=torch.float64)) for s in shards]
              for shards in shards_per_rank]
    for ps, shards in zip(params, shards_per_rank):
        for p, s in zip(ps, shards):
            p.grad = s.detach().double().clone()
    norm = torch.nn.utils.clip_grad_norm_([p for ps in params for p in ps], max_norm)
    return float(norm), [[p.grad for p in ps] for ps in params]


# --------------------------------------------------------------------------- rank-side drivers


def _member_group(group_ranks: Sequence[int] | None) -> tuple[Any, bool]:
    """``(group, this rank is a member)``; ``new_group`` is called on every rank as required."""
    if group_ranks is None:
        return None, True
    group = dist.new_group(list(group_ranks))
    return group, dist.get_rank() in group_ranks


def reduce_scatter_on_rank(
    reduce_scatter_fn: Callable[..., torch.Tensor],
    numel: int,
    seed: int,
    denominator: float | None = None,
    dtype: torch.dtype = torch.float32,
    group_ranks: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Call ``reduce_scatter_fn`` on this rank's :func:`synthetic_flat_grad`.

    Group members get the gradient of their *group* rank. Returns ``None`` on ranks outside
    ``group_ranks``, else ``{"shard": result, "input_unchanged": bool}``. Without a group
    and a denominator the function is called with its defaults, ``fn(flat)``.
    """
    group, member = _member_group(group_ranks)
    if not member:
        return None
    flat = synthetic_flat_grad(numel, dist.get_rank(group), seed, dtype)
    before = flat.clone()
    if group is None and denominator is None:
        shard = reduce_scatter_fn(flat)
    else:
        shard = reduce_scatter_fn(flat, group=group, denominator=denominator)
    return {"shard": shard, "input_unchanged": torch.equal(flat, before)}


def clip_on_rank(
    clip_fn: Callable[..., torch.Tensor],
    shards_per_rank: Sequence[Sequence[torch.Tensor]],
    max_norm: float,
    group_ranks: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Call ``clip_fn(my_shards, max_norm, group=...)``; return its norm and the shards after.

    ``shards_per_rank[g]`` is the list of shards of group rank ``g``. The returned shards
    are the very tensors that were passed in, so a copy-instead-of-in-place shows up.
    """
    group, member = _member_group(group_ranks)
    if not member:
        return None
    shards = [s.clone() for s in shards_per_rank[dist.get_rank(group)]]
    norm = clip_fn(shards, max_norm, group=group)
    return {"norm": norm, "shards": shards}


def _flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def sharded_versus_replicated_on_rank(
    owned_range_fn: Callable[[int, int, int], tuple[int, int]],
    reduce_scatter_fn: Callable[..., torch.Tensor],
    clip_fn: Callable[..., torch.Tensor],
    model_fn: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    max_norm: float,
    token_denominator: bool = False,
) -> dict[str, Any]:
    """One ZeRO-2 gradient step next to a replicated one, on this rank.

    Replicated (the reference): local mean-loss backward, ``all_reduce`` of the flat
    gradient divided by N, ``torch.nn.utils.clip_grad_norm_`` on the full model.
    Sharded (the student's functions): flat local gradient, ``reduce_scatter_fn``, then
    ``clip_fn`` on the owned shard, then the real part ``owned_range_fn`` names. With
    ``token_denominator`` the sharded side back-propagates the local *sum* of squared
    errors and passes the global element count as ``denominator``, which must give the
    same mean gradient.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ys = shard_batch(x, y, rank, world)

    replicated = model_fn()
    nn.functional.mse_loss(replicated(xs), ys).backward()
    flat = _flat_grad(replicated)
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in replicated.parameters():
        p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
        offset += p.numel()
    replicated_norm = torch.nn.utils.clip_grad_norm_(replicated.parameters(), max_norm)
    replicated_flat = _flat_grad(replicated)

    sharded = model_fn()
    if token_denominator:
        nn.functional.mse_loss(sharded(xs), ys, reduction="sum").backward()
        shard = reduce_scatter_fn(_flat_grad(sharded), denominator=float(y.numel()))
    else:
        nn.functional.mse_loss(sharded(xs), ys).backward()
        shard = reduce_scatter_fn(_flat_grad(sharded))
    norm = clip_fn([shard], max_norm)
    start, stop = owned_range_fn(replicated_flat.numel(), world, rank)
    return {"shard": shard, "norm": norm, "range": (start, stop),
            "replicated_norm": replicated_norm, "replicated_owned": replicated_flat[start:stop].clone()}


# --------------------------------------------------------------------------- checks


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def assert_owned_ranges(fn: Callable[[int, int, int], tuple[int, int]],
                        cases: Sequence[tuple[int, int]]) -> None:
    """``fn(numel, N, rank)`` equals :func:`owned_range` for every rank of every case."""
    for numel, n in cases:
        for rank in range(n):
            got, exp = fn(numel, n, rank), owned_range(numel, n, rank)
            if isinstance(got, list):
                got = tuple(got)
            if not (isinstance(got, tuple) and len(got) == 2 and all(type(v) is int for v in got)):
                raise AssertionError(f"owned_range({numel}, {n}, {rank}) returned {got!r}; "
                                     f"return a tuple of two Python ints (start, stop).")
            if got == exp:
                continue
            s, floor = shard_size(numel, n), numel // n
            hint = ""
            if got == (rank * floor, (rank + 1) * floor) or got == (min(rank * floor, numel), min((rank + 1) * floor, numel)):
                hint = (f" That is S = {numel} // {n} = {floor}: the last {numel - n * floor} element(s) "
                        f"belong to nobody. Pad to a multiple of N: S = ceil(numel / N) = {s}.")
            elif got == (rank * s, (rank + 1) * s):
                hint = (f" Those are the bounds in the *padded* vector; the real gradient has only "
                        f"{numel} elements, so clamp both ends to numel.")
            raise AssertionError(f"owned_range(numel={numel}, world_size={n}, rank={rank}) returned {got}, "
                                 f"expected {exp} (S = ceil({numel}/{n}) = {s}).{hint}")


def _shard_hint(got: torch.Tensor, exp: torch.Tensor, all_exp: Sequence[torch.Tensor], n: int,
                denominator: float | None) -> str:
    g, e = got.detach().double(), exp.double()
    denom = float(e @ e)
    scale = float(g @ e) / denom if denom > 0 else math.nan
    d = n if denominator is None else denominator
    if not math.isnan(scale):
        if abs(scale - d) <= 0.02 * d and d != 1:
            return f" Your slice is {d:g}x the expected one: you summed without dividing by {d:g}."
        if denominator is not None and abs(scale - denominator / n) <= 0.02 * denominator / n:
            return (f" Your slice is divided by the world size {n}, but a denominator={denominator:g} "
                    f"was given: divide by it instead.")
        if abs(scale - 1 / d) <= 0.02 / d:
            return f" Your slice is 1/{d:g} of the expected one: you normalized twice."
    for other, cand in enumerate(all_exp):
        if cand.shape == got.shape and torch.allclose(g, cand, atol=1e-5, rtol=1e-4):
            return f" It equals the slice of group rank {other}: own the slice of your rank in `group`."
    return ""


def assert_reduce_scattered(
    results: Sequence[Mapping[str, Any] | None],
    ledger: Any,
    numel: int,
    seed: int,
    denominator: float | None = None,
    dtype: torch.dtype = torch.float32,
    group_ranks: Sequence[int] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> None:
    """Check :func:`reduce_scatter_on_rank` results and the collectives each member issued."""
    members = list(group_ranks) if group_ranks is not None else list(range(len(results)))
    n = len(members)
    s, padded = shard_size(numel, n), padded_numel(numel, n)
    expected = expected_owned_slices([synthetic_flat_grad(numel, g, seed) for g in range(n)], denominator)
    case = f"numel={numel}, N={n}" + (f", denominator={denominator:g}" if denominator is not None else "")
    for g, rank in enumerate(members):
        out = results[rank]
        shard = out["shard"]
        if not isinstance(shard, torch.Tensor):
            raise AssertionError(f"[{case}] rank {rank} returned {type(shard).__name__}; return a tensor.")
        if shard.numel() != s:
            if shard.numel() in (numel, padded):
                hint = (" That is the whole reduced gradient: keep only the owner slice, so the "
                        "gradient memory per rank drops from Ψ to Ψ/N.")
            elif shard.numel() == numel // n:
                hint = f" That is {numel} // {n}: pad with zeros to a multiple of N first (S = ceil(numel/N))."
            else:
                hint = ""
            raise AssertionError(f"[{case}] rank {rank} returned {shard.numel()} elements, expected the "
                                 f"owner slice of S = ceil({numel}/{n}) = {s}.{hint}")
        if shard.dtype != dtype:
            raise AssertionError(f"[{case}] rank {rank} returned dtype {shard.dtype}, expected {dtype} "
                                 f"(the dtype of flat_grad).")
        if not out["input_unchanged"]:
            raise AssertionError(f"[{case}] rank {rank}: flat_grad was modified; leave the input as it is "
                                 f"(pad and normalize a copy).")
        exp = expected[g]
        if not torch.allclose(shard.detach().double().reshape(-1), exp, atol=atol, rtol=rtol):
            diff = float((shard.detach().double().reshape(-1) - exp).abs().max())
            hint = _shard_hint(shard.reshape(-1), exp, expected, n, denominator)
            raise AssertionError(f"[{case}] group rank {g} (global rank {rank}) should own elements "
                                 f"[{g * s}, {(g + 1) * s}) of the padded sum / "
                                 f"{n if denominator is None else denominator:g}; max |diff| {diff:.3g}.{hint}")
    assert_one_reduce_scatter(ledger, members, padded, dtype, case)


def assert_one_reduce_scatter(ledger: Any, members: Sequence[int], padded: int, dtype: torch.dtype,
                              case: str = "") -> None:
    """Each member issued exactly one collective: a reduce-scatter of the padded gradient."""
    n = len(members)
    element_size = torch.tensor([], dtype=dtype).element_size()
    prefix = f"[{case}] " if case else ""
    for rank in members:
        ops = [r for r in ledger.records[rank] if r.group_size == n]
        names = [r.describe() for r in ops]
        if any(r.op == "all_reduce" for r in ops):
            raise AssertionError(
                f"{prefix}rank {rank} issued {names}. An all-reduce hands every rank the whole "
                f"reduced gradient (2(N-1)/N x bytes sent, Ψ elements kept) to keep 1/N of it; a "
                f"reduce-scatter sends half the bytes and delivers only the owner slice.")
        if len(ops) != 1 or ops[0].op not in REDUCE_SCATTER_OPS:
            raise AssertionError(f"{prefix}rank {rank} issued {names or 'no collective'}; expected exactly "
                                 f"one reduce-scatter (dist.reduce_scatter_single).")
        rec = ops[0]
        if rec.numel != padded:
            raise AssertionError(f"{prefix}rank {rank}'s reduce-scatter input has {rec.numel} elements, "
                                 f"expected the padded gradient of N x S = {padded}.")
        want = ring_reduce_scatter_bytes(padded, element_size, n)
        if not math.isclose(rec.ring_bytes, want):
            raise AssertionError(f"{prefix}rank {rank}'s reduce-scatter sends {rec.ring_bytes:g} bytes, "
                                 f"expected (N-1)/N x {padded} x {element_size} = {want:g}.")


def _norm_hint(got: float, local_norms: Sequence[float]) -> str:
    n = len(local_norms)
    candidates = {
        "this rank's local shard norm": None,
        "the mean of the shard norms": sum(local_norms) / n,
        "the sum of the shard norms": sum(local_norms),
        "sqrt(mean of squared shard norms), i.e. divided by N": math.sqrt(sum(v * v for v in local_norms) / n),
    }
    for what, value in candidates.items():
        if value is None:
            if any(math.isclose(got, v, rel_tol=1e-4) for v in local_norms):
                return (f" It equals a local shard norm: each shard holds only part of the gradient, so "
                        f"all-reduce (SUM) the squared local norms and take the square root.")
        elif math.isclose(got, value, rel_tol=1e-4):
            return (f" It equals {what}. Norms do not add; squares do: ||g||^2 = sum_r ||g_r||^2, so "
                    f"all-reduce (SUM) the squared shard norms, then take the square root.")
    return ""


def assert_clipped(
    results: Sequence[Mapping[str, Any] | None],
    shards_per_rank: Sequence[Sequence[torch.Tensor]],
    max_norm: float,
    group_ranks: Sequence[int] | None = None,
    atol: float = 1e-6,
    rtol: float = 1e-5,
) -> None:
    """Check :func:`clip_on_rank` results against ``clip_grad_norm_`` on the full gradient."""
    members = list(group_ranks) if group_ranks is not None else list(range(len(results)))
    exp_norm, exp_shards = clip_reference(shards_per_rank, max_norm)
    local_norms = [math.sqrt(sum(float(s.double().pow(2).sum()) for s in shards)) for shards in shards_per_rank]
    coef = min(1.0, max_norm / (exp_norm + CLIP_EPS))
    case = f"N={len(members)}, max_norm={max_norm:g}, global norm={exp_norm:.4g}"
    norms = []
    for g, rank in enumerate(members):
        norm = results[rank]["norm"]
        if not isinstance(norm, torch.Tensor) or norm.numel() != 1:
            raise AssertionError(f"[{case}] rank {rank} returned {norm!r}; return the global norm as a "
                                 f"0-dim tensor, like clip_grad_norm_.")
        value = float(norm)
        norms.append(value)
        if not math.isclose(value, exp_norm, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"[{case}] rank {rank} returned norm {value:.6g}, expected the global "
                                 f"2-norm {exp_norm:.6g}.{_norm_hint(value, local_norms)}")
        for k, (got, exp) in enumerate(zip(results[rank]["shards"], exp_shards[g])):
            if torch.allclose(got.double(), exp, atol=atol, rtol=rtol):
                continue
            original = shards_per_rank[g][k].double()
            if torch.equal(got.double(), original) and coef < 1.0:
                hint = " The shard is unchanged: scale the given tensors in place (mul_), do not rebind them."
            elif coef == 1.0:
                hint = (f" The global norm is below max_norm, so the coefficient max_norm / (norm + 1e-6) "
                        f"must be clamped to 1.0: never scale gradients up.")
            else:
                hint = f" Multiply every shard by max_norm / (global_norm + 1e-6) = {coef:.6g}."
            diff = float((got.double() - exp).abs().max())
            raise AssertionError(f"[{case}] rank {rank}, shard {k}: max |diff| {diff:.3g} from the gradient "
                                 f"clip_grad_norm_ produces on the full model.{hint}")
    if len(set(norms)) > 1:
        raise AssertionError(f"[{case}] ranks returned different norms {norms}: every rank must see the same "
                             f"global norm.")


def assert_matches_replicated(results: Sequence[Mapping[str, Any]], numel: int, atol: float = 1e-5,
                              rtol: float = 1e-4) -> None:
    """Check :func:`sharded_versus_replicated_on_rank`: owned part equals the replicated clipped slice."""
    n = len(results)
    for rank, out in enumerate(results):
        start, stop = out["range"]
        if (start, stop) != owned_range(numel, n, rank):
            raise AssertionError(f"rank {rank}: owned_range({numel}, {n}, {rank}) gave {(start, stop)}, "
                                 f"expected {owned_range(numel, n, rank)}.")
        got_norm, ref_norm = float(out["norm"]), float(out["replicated_norm"])
        if not math.isclose(got_norm, ref_norm, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"rank {rank}: sharded global norm {got_norm:.6g}, but clip_grad_norm_ on the "
                                 f"all-reduced full model gives {ref_norm:.6g}.")
        shard = out["shard"].detach().reshape(-1)
        real, pad = shard[:stop - start], shard[stop - start:]
        if real.shape != out["replicated_owned"].shape or not torch.allclose(
                real.double(), out["replicated_owned"].double(), atol=atol, rtol=rtol):
            raise AssertionError(f"rank {rank}: the owned, clipped gradient elements [{start}, {stop}) differ "
                                 f"from the replicated run (all_reduce / N, then clip_grad_norm_).")
        if pad.numel() and bool(pad.ne(0).any()):
            raise AssertionError(f"rank {rank}: the padding positions of the shard are not zero.")


def assert_zero2_memory(fn: Callable[[int, int, int], float], cases: Sequence[tuple[int, int, int]]) -> None:
    """``fn(num_params, N, k)`` equals ``adam_memory_bytes(..., stage=2)`` on every case."""
    for psi, n, k in cases:
        got, exp = fn(psi, n, k), adam_memory_bytes(psi, n, stage=2, k=k)
        if not _is_number(got):
            raise AssertionError(f"zero2_memory_bytes{(psi, n, k)} returned {got!r}; return a number of bytes.")
        if math.isclose(got, exp, rel_tol=1e-9, abs_tol=1e-9):
            continue
        hint = ""
        for stage, why in ((1, "the gradient is still replicated (that is stage 1)"),
                           (3, "the fp16 parameters are sharded too (that is stage 3)"),
                           (0, "nothing is sharded (that is stage 0)")):
            if math.isclose(got, adam_memory_bytes(psi, n, stage=stage, k=k), rel_tol=1e-9):
                hint = f" Your value means {why}."
        raise AssertionError(f"zero2_memory_bytes(num_params={psi}, world_size={n}, k={k}) returned {got!r}, "
                             f"expected 2Ψ + (2+K)Ψ/N = {exp!r}.{hint}")


# --------------------------------------------------------------------------- chapter: figure and explorer


def plot_shard_norms(local_norms: Sequence[float], global_norm: float, reference_norm: float | None = None,
                     *, title: str = "Local shard norms vs the global gradient norm") -> Figure:
    """Bars: each rank's local shard norm; lines: the true global norm and two wrong combinations.

    ``global_norm`` is sqrt of the all-reduced sum of squared shard norms (as measured);
    ``reference_norm`` (optional) is ``clip_grad_norm_`` on the unsharded gradient, drawn
    as a marker so the reader sees the two agree. Norms are in gradient units.
    """
    if not local_norms:
        raise ValueError("need at least one local norm")
    n = len(local_norms)
    fig = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    ax.bar(range(n), local_norms, color="#9ecae1", edgecolor="#3182bd", label="local shard norm ||g_r||")
    lines = [
        (global_norm, "k", "-", "global norm sqrt(Σ ||g_r||²)  (correct)"),
        (sum(local_norms), "#d62728", "--", "sum of shard norms Σ ||g_r||  (wrong)"),
        (sum(local_norms) / n, "#ff7f0e", ":", "mean of shard norms  (wrong)"),
    ]
    for value, color, style, label in lines:
        ax.axhline(value, color=color, ls=style, lw=1.8, label=f"{label} = {value:.3g}")
    if reference_norm is not None:
        ax.plot([n - 0.5], [reference_norm], marker="*", ms=14, color="#2ca02c", ls="none",
                label=f"clip_grad_norm_ on the full gradient = {reference_norm:.3g}")
    ax.set_xticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set_xlabel("rank (owner of one slice of the flat gradient)")
    ax.set_ylabel("2-norm of gradient values")
    ax.set_ylim(0, max(sum(local_norms), global_norm) * 1.45)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def _gb(value: float, _: object = None) -> str:
    return f"{value / 1e9:.3g} GB"


def plot_stage_memory(num_params: int, world_sizes: Sequence[int], k: int = 12, *,
                      marked: Mapping[int, float] | None = None) -> Figure:
    """Persistent bytes per rank for ZeRO stages 0, 1, 2 against N (from ``adam_memory_bytes``).

    ``marked`` maps world sizes to bytes to overlay as markers (e.g. the value a reader
    computed). The dotted line is stage 2's floor, the 2Ψ of fp16 parameters.
    """
    ws = sorted(set(int(n) for n in world_sizes))
    if not ws or ws[0] < 1:
        raise ValueError("world sizes must be >= 1")
    fig = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    names = {0: "stage 0: replicated (2+2+K)Ψ", 1: "stage 1: shard optimizer state 4Ψ + KΨ/N",
             2: "stage 2: + shard gradients 2Ψ + (2+K)Ψ/N"}
    colors = {0: "#7f7f7f", 1: "#1f77b4", 2: "#d62728"}
    for stage, label in names.items():
        ax.plot(ws, [adam_memory_bytes(num_params, n, stage, k) for n in ws], marker="o", ms=3,
                color=colors[stage], label=label)
    ax.axhline(2 * num_params, color="#d62728", ls=":", lw=1, label="2Ψ: fp16 parameters (stage 2 floor)")
    for n, value in (marked or {}).items():
        ax.plot([n], [value], "o", ms=10, mfc="none", mew=2, color="k", label=f"N = {n}: {_gb(value)} per rank")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, adam_memory_bytes(num_params, 1, 0, k) * 1.08)
    ax.yaxis.set_major_formatter(FuncFormatter(_gb))
    ax.set_xlabel("world size N (data-parallel ranks)")
    ax.set_ylabel("model-state bytes per rank")
    ax.set_title(f"Mixed-precision Adam, Ψ = {num_params / 1e9:.3g} B parameters, K = {k}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    return fig


def stage_costs(num_params: int, world_size: int, k: int = 12, bytes_per_grad: int = 2) -> dict[str, float]:
    """Bytes per rank for ZeRO stages 0-2 and one step's ring traffic of stage 2 vs stage 0.

    Stage 2 reduce-scatters the gradient and all-gathers the updated parameters (both
    ``bytes_per_grad`` bytes/element); stage 0 all-reduces the gradient. Same total.
    """
    rs = ring_reduce_scatter_bytes(num_params, bytes_per_grad, world_size)
    ag = ring_allgather_bytes(num_params, bytes_per_grad, world_size)
    ar = ring_allreduce_bytes(num_params, bytes_per_grad, world_size)
    memory = {f"stage{s}_bytes": adam_memory_bytes(num_params, world_size, s, k) for s in (0, 1, 2)}
    return memory | {"reduce_scatter_bytes": rs, "all_gather_bytes": ag, "all_reduce_bytes": ar}


def gradient_sharding_explorer(num_params: float = 7.5e9, world_size: int = 64, k: int = 12):
    """Sliders for Ψ (log), N and K: bytes per rank for stages 0-2 and stage-2 traffic per step.

    Returns an ``ipywidgets.VBox`` with an ``update()`` method that recomputes, redraws
    and returns the numbers of :func:`stage_costs` (so it also works headless).
    """
    import ipywidgets as W
    from IPython.display import Image, display

    style, layout = {"description_width": "140px"}, W.Layout(width="520px")
    p_slider = W.FloatLogSlider(value=num_params, base=10, min=6, max=12, step=0.05, description="parameters Ψ",
                                style=style, layout=layout, continuous_update=False, readout_format=".3g")
    n_slider = W.IntSlider(value=world_size, min=1, max=1024, description="world size N", style=style,
                           layout=layout, continuous_update=False)
    k_slider = W.IntSlider(value=k, min=0, max=24, description="optimizer bytes K", style=style, layout=layout,
                           continuous_update=False)
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, float]:
        psi, n, kk = int(round(p_slider.value)), int(n_slider.value), int(k_slider.value)
        result = stage_costs(psi, n, kk)
        summary.value = (
            f"<b>per rank</b>: stage 0 {_gb(result['stage0_bytes'])} · stage 1 {_gb(result['stage1_bytes'])} · "
            f"<b>stage 2 {_gb(result['stage2_bytes'])}</b><br>"
            f"<b>traffic per step</b> (fp16, ring): reduce-scatter {_gb(result['reduce_scatter_bytes'])} + "
            f"all-gather {_gb(result['all_gather_bytes'])} = all-reduce {_gb(result['all_reduce_bytes'])}")
        fig = plot_stage_memory(psi, [2 ** e for e in range(11)], kk, marked={n: result["stage2_bytes"]})
        png = io.BytesIO()
        fig.savefig(png, format="png", dpi=90)
        with out:
            out.clear_output(wait=True)
            display(Image(data=png.getvalue(), format="png"))
        box.last_result = result
        return result

    for w in (p_slider, n_slider, k_slider):
        w.observe(update, names="value")
    box = W.VBox([p_slider, n_slider, k_slider, summary, out])
    box.controls = {"num_params": p_slider, "world_size": n_slider, "k": k_slider}
    box.update = update
    update()
    return box
