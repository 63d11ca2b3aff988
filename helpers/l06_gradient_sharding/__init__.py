"""Lesson 06, gradient sharding (ZeRO stage 2): synthetic data, rank-side drivers, self-checks, figures.

Layout used throughout: a flat gradient of ``numel`` elements is padded with zeros to
``N * S`` elements, ``S = ceil(numel / N)``; rank ``r`` (its rank in the group) owns
elements ``[r*S, (r+1)*S)`` of the padded vector, of which those below ``numel`` are real
gradient entries and the rest padding.

* **data**: deterministic flat gradients and shards that every process can rebuild;
* **rank-side drivers** (``*_on_rank``) that run inside :func:`helpers.runtime.cluster.run`, call a
  student's function the way its contract says and return plain tensors;
* **checks** (``assert_*``) whose messages name the classic mistakes. They compare with values
  the test writes down, with PyTorch's own ``clip_grad_norm_`` and ``DistributedDataParallel``,
  or with the ledger; nothing here computes an answer of the assignment;
* the chapter's figures and explorer, which draw measured or stored numbers
  (``helpers/stored/06_*.json``).

All byte counts are bytes (1 GB = 1e9 B); norms are Euclidean 2-norms of gradient values.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from torch import nn

from helpers.shared import checks
from helpers.shared.models import shard_batch
from helpers.shared.stored import load

REDUCE_SCATTER_OPS = ("reduce_scatter_single", "reduce_scatter_tensor", "reduce_scatter")


# --------------------------------------------------------------------------- data


def synthetic_flat_grad(numel: int, rank: int, seed: int | None = None,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank ``rank``'s deterministic flat "gradient" of ``numel`` elements.

    With a ``seed``: ``(rank + 1) * base + noise_rank``, a shared part and a rank-specific
    part, so the sum over ranks is neither one rank's vector nor a multiple of one. Without
    one: the ramp ``(rank + 1) * [0, 1, ..., numel - 1]``, whose sums are easy to write down.
    """
    if seed is None:
        return ((rank + 1) * torch.arange(numel, dtype=torch.float64)).to(dtype)
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
    seed: int | None = None,
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

    Replicated (the reference): a real ``DistributedDataParallel`` backward of the local mean
    loss, then ``torch.nn.utils.clip_grad_norm_`` on the full model. Sharded (the student's
    functions): flat local gradient, ``reduce_scatter_fn``, then ``clip_fn`` on the owned
    shard, then the real part ``owned_range_fn`` names. With ``token_denominator`` the
    sharded side back-propagates the local *sum* of squared errors and passes the global
    element count as ``denominator``, which must give the same mean gradient.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    xs, ys = shard_batch(x, y, rank, world)

    replicated = DDP(model_fn())
    nn.functional.mse_loss(replicated(xs), ys).backward()
    replicated_norm = torch.nn.utils.clip_grad_norm_(replicated.parameters(), max_norm)
    replicated_flat = _flat_grad(replicated.module)

    sharded = model_fn()
    if token_denominator:
        nn.functional.mse_loss(sharded(xs), ys, reduction="sum").backward()
        shard = reduce_scatter_fn(_flat_grad(sharded), denominator=float(y.numel()))
    else:
        nn.functional.mse_loss(sharded(xs), ys).backward()
        shard = reduce_scatter_fn(_flat_grad(sharded))
    norm = clip_fn([shard], max_norm)
    start, stop = owned_range_fn(replicated_flat.numel(), world, rank)
    return {"shard": shard, "norm": norm, "range": (start, stop), "replicated_norm": replicated_norm,
            "replicated_owned": replicated_flat[start:stop].clone()}


# The design exercise's optimizers: name -> (torch.optim class, fp32 state tensors it keeps per element).
OPTIMIZERS: dict[str, tuple[type, Callable[[Mapping[str, Any]], int]]] = {
    "sgd": (torch.optim.SGD, lambda hyper: 1 if hyper.get("momentum", 0.0) else 0),
    "adam": (torch.optim.Adam, lambda hyper: 2),
}
OptimizerSpec = tuple[str, Mapping[str, Any]]  # ("adam", {"lr": 0.01, ...})


def make_optimizer_fn(spec: OptimizerSpec) -> Callable[[Any], torch.optim.Optimizer]:
    """``make_optimizer(tensors)``: a new ``torch.optim`` optimizer of ``spec`` over ``tensors``."""
    cls, _ = OPTIMIZERS[spec[0]]
    hyper = dict(spec[1])
    return lambda tensors: cls(tensors, **hyper)


def state_tensors_per_element(spec: OptimizerSpec) -> int:
    """fp32 state tensors ``spec``'s optimizer keeps per parameter element (SGD 0, momentum 1, Adam 2)."""
    return OPTIMIZERS[spec[0]][1](spec[1])


def zero2_budget_bytes(num_params: int, world_size: int, spec: OptimizerSpec) -> int:
    """The design exercise's per-rank budget in bytes: ``4 ceil(P/N) (2 + s)``, room for an fp32 parameter
    shard, a gradient shard and ``s`` state shards of ``ceil(P/N)`` elements."""
    return 4 * math.ceil(num_params / world_size) * (2 + state_tensors_per_element(spec))


def _storage(t: torch.Tensor) -> tuple[int, int]:
    return t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()


def _reachable(obj: Any, max_depth: int = 10) -> tuple[list[torch.Tensor], list[torch.optim.Optimizer]]:
    """The tensors and the ``torch.optim`` optimizers reachable from ``obj``.

    Walks attributes, dicts (keys and values), lists, tuples and sets up to ``max_depth``
    levels; modules and process groups are not entered.
    """
    seen: set[int] = set()
    tensors: list[torch.Tensor] = []
    optimizers: list[torch.optim.Optimizer] = []

    def visit(value: Any, depth: int) -> None:
        if depth > max_depth or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            return
        if isinstance(value, torch.optim.Optimizer):
            optimizers.append(value)
        if isinstance(value, Mapping):
            for k, v in value.items():
                visit(k, depth + 1)
                visit(v, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                visit(v, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, (nn.Module, dist.ProcessGroup, type)):
            visit(vars(value), depth + 1)

    visit(obj, 0)
    return tensors, optimizers


def _storage_bytes(tensors: Sequence[torch.Tensor | None], params: Sequence[torch.Tensor]) -> int:
    """Bytes of the distinct storages of ``tensors``, leaving out ``params``' storages and 0-dim tensors."""
    excluded = {_storage(p)[0] for p in params}
    counted = dict(_storage(t) for t in tensors if t is not None and t.dim() > 0 and _storage(t)[0] not in excluded)
    return sum(counted.values())


def held_tensor_bytes(obj: Any, params: Sequence[torch.Tensor]) -> dict[str, int]:
    """What ``obj`` keeps, in bytes: ``held`` and ``state``.

    ``held``: the storages of the tensors ``obj`` reaches (see :func:`_reachable`), of their
    ``.grad`` and of ``params``' ``.grad``, each once; ``state``: the storages of the tensors in
    the ``state`` of the ``torch.optim`` optimizers ``obj`` reaches. A view counts its whole
    storage; ``params``' own storages and 0-dim tensors (step counters) are not counted.
    """
    tensors, optimizers = _reachable(obj)
    grads = [t.grad for t in [*tensors, *params]]
    in_state = [t for opt in optimizers for per_tensor in opt.state.values() for t in per_tensor.values()
                if isinstance(t, torch.Tensor)]
    return {"held": _storage_bytes([*tensors, *grads], params), "state": _storage_bytes(in_state, params)}


def zero2_train_on_rank(
    optimizer_cls: type,
    model_fn: Callable[[], nn.Module],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    spec: OptimizerSpec,
    max_norm: float | None,
    group_ranks: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Train with ``optimizer_cls(model.parameters(), make_optimizer, max_norm=max_norm, group=group)``.

    The design exercise's driver. One step per global batch on this rank's equal shard (by
    group rank): ``zero_grad()``, local mean-squared-error ``backward()``, ``step()``. A
    ``dist.barrier`` on the group after the constructor and after each step marks in the ledger
    where each step's collectives end. Ranks outside ``group_ranks`` return ``None``. Returns
    ``params`` (after each step, by name) and ``held_bytes`` (:func:`held_tensor_bytes` after
    each step: bytes ``held`` in all and optimizer ``state``).
    """
    group, member = _member_group(group_ranks)
    if not member:
        return None
    model = model_fn()
    params = list(model.parameters())
    opt = optimizer_cls(model.parameters(), make_optimizer_fn(spec), max_norm=max_norm, group=group)
    dist.barrier(group=group)
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    after, held = [], []
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, n)
        opt.zero_grad()
        nn.functional.mse_loss(model(xs), ys).backward()
        opt.step()
        held.append(held_tensor_bytes(opt, params))
        after.append({name: p.detach().clone() for name, p in model.named_parameters()})
        dist.barrier(group=group)
    return {"params": after, "held_bytes": held, "numel": sum(p.numel() for p in params)}


def replicated_reference(model_fn: Callable[[], nn.Module], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         spec: OptimizerSpec, max_norm: float | None) -> list[dict[str, torch.Tensor]]:
    """float64 parameters after each step of replicated training, in one process.

    Each step: full-batch mean-squared-error ``backward()``, ``torch.nn.utils.clip_grad_norm_``
    (when ``max_norm`` is not ``None``), then ``spec``'s ``torch.optim`` optimizer's ``step()``.
    """
    model = model_fn().double()
    opt = make_optimizer_fn(spec)(model.parameters())
    after = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(model(x.double()), y.double()).backward()
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        opt.step()
        after.append({name: p.detach().clone() for name, p in model.named_parameters()})
    return after


# --------------------------------------------------------------------------- checks


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def assert_owned_ranges(fn: Callable[[int, int, int], Any], cases: Sequence[tuple[int, int, Sequence]]) -> None:
    """``fn(numel, N, rank)`` is ``expected[rank]`` for every case ``(numel, N, expected)``."""
    for numel, n, expected in cases:
        got = []
        for rank in range(n):
            value = fn(numel, n, rank)
            value = tuple(value) if isinstance(value, list) else value
            if not (isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value)):
                raise AssertionError(f"owned_range({numel}, {n}, {rank}) returned {value!r}; "
                                     f"return a tuple of two Python ints (start, stop).")
            got.append(value)
        for rank, (value, exp) in enumerate(zip(got, expected)):
            if value == tuple(exp):
                continue
            hint = ""
            if max(value) > numel:
                hint = (f" That range goes past numel = {numel}: it counts padding, which is not gradient. "
                        f"Clamp both ends to numel.")
            elif got[-1][1] < numel:
                hint = (f" With these ranges the last {numel - got[-1][1]} element(s) belong to nobody: "
                        f"S = numel // N rounds down. Pad to a multiple of N: S = ceil(numel / N).")
            raise AssertionError(f"owned_range(numel={numel}, world_size={n}, rank={rank}) returned {value}, "
                                 f"expected {tuple(exp)}.{hint}")


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
    expected: Sequence[Sequence[float] | torch.Tensor],
    denominator: float | None = None,
    dtype: torch.dtype = torch.float32,
    group_ranks: Sequence[int] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> None:
    """Check :func:`reduce_scatter_on_rank` results against ``expected[g]``, group rank ``g``'s slice.

    ``expected`` holds one slice of ``S`` elements per group rank (padding positions 0); the
    ledger must show one reduce-scatter of the ``N * S`` padded elements per member.
    """
    members = list(group_ranks) if group_ranks is not None else list(range(len(results)))
    n = len(members)
    expected = [torch.as_tensor(e, dtype=torch.float64).reshape(-1) for e in expected]
    s = expected[0].numel()
    case = f"numel={numel}, N={n}" + (f", denominator={denominator:g}" if denominator is not None else "")
    for g, rank in enumerate(members):
        out = results[rank]
        shard = out["shard"]
        if not isinstance(shard, torch.Tensor):
            raise AssertionError(f"[{case}] rank {rank} returned {type(shard).__name__}; return a tensor.")
        if shard.numel() != s:
            if shard.numel() in (numel, n * s):
                hint = (" That is the whole reduced gradient: keep only the owner slice, so the "
                        "gradient memory per rank drops from Ψ to Ψ/N.")
            elif shard.numel() == numel // n:
                hint = f" That is {numel} // {n}: pad with zeros to a multiple of N first (S = ceil(numel/N))."
            else:
                hint = ""
            raise AssertionError(f"[{case}] rank {rank} returned {shard.numel()} elements, expected the "
                                 f"owner slice of S = {s}.{hint}")
        if shard.dtype != dtype:
            raise AssertionError(f"[{case}] rank {rank} returned dtype {shard.dtype}, expected {dtype} "
                                 f"(the dtype of flat_grad).")
        if not out["input_unchanged"]:
            raise AssertionError(f"[{case}] rank {rank}: flat_grad was modified; leave the input as it is "
                                 f"(pad and normalize a copy).")
        got = shard.detach().double().reshape(-1)
        if not torch.allclose(got, expected[g], atol=atol, rtol=rtol):
            diff = float((got - expected[g]).abs().max())
            raise AssertionError(f"[{case}] group rank {g} (global rank {rank}) should own elements "
                                 f"[{g * s}, {(g + 1) * s}) of the padded sum / "
                                 f"{n if denominator is None else denominator:g}, that is "
                                 f"{[round(v, 4) for v in expected[g].tolist()][:8]}; max |diff| {diff:.3g}."
                                 f"{_shard_hint(got, expected[g], expected, n, denominator)}")
    assert_one_reduce_scatter(ledger, members, n * s, case)


def _collectives(ledger: Any, rank: int, group_size: int) -> list:
    return [r for r in ledger.records[rank] if r.group_size == group_size]


def assert_one_reduce_scatter(ledger: Any, members: Sequence[int], padded: int, case: str = "") -> None:
    """Each member issued exactly one collective: a reduce-scatter of the ``padded`` elements."""
    prefix = f"[{case}] " if case else ""
    for rank in members:
        ops = _collectives(ledger, rank, len(members))
        names = [r.describe() for r in ops]
        if any(r.op == "all_reduce" for r in ops):
            raise AssertionError(
                f"{prefix}rank {rank} issued {names}. An all-reduce hands every rank the whole "
                f"reduced gradient (2(N-1)/N x bytes sent, Ψ elements kept) to keep 1/N of it; a "
                f"reduce-scatter sends half the bytes and delivers only the owner slice.")
        if len(ops) != 1 or ops[0].op not in REDUCE_SCATTER_OPS:
            raise AssertionError(f"{prefix}rank {rank} issued {names or 'no collective'}; expected exactly "
                                 f"one reduce-scatter (dist.reduce_scatter_single).")
        if ops[0].numel != padded:
            raise AssertionError(f"{prefix}rank {rank}'s reduce-scatter input has {ops[0].numel} elements, "
                                 f"expected the padded gradient of N x S = {padded}.")


def assert_one_scalar_all_reduce(ledger: Any, members: Sequence[int]) -> None:
    """Each member issued exactly one collective: an all-reduce of a single number."""
    for rank in members:
        ops = _collectives(ledger, rank, len(members))
        if len(ops) != 1 or ops[0].op != "all_reduce" or ops[0].numel != 1:
            raise AssertionError(f"Rank {rank} issued {[r.describe() for r in ops] or 'no collective'}; the global "
                                 f"norm needs exactly one all-reduce (SUM) of one number, the local sum of "
                                 f"squares. Gathering the shards moves the whole gradient.")


def clipped_by_torch(shards_per_rank: Sequence[Sequence[torch.Tensor]], max_norm: float
                     ) -> tuple[float, list[list[torch.Tensor]]]:
    """Global norm and clipped shards from PyTorch's ``torch.nn.utils.clip_grad_norm_`` (float64).

    All ranks' shards together are the full gradient; PyTorch clips it in one process, which
    is what the sharded version must reproduce on every rank.
    """
    params = [[nn.Parameter(torch.zeros_like(s, dtype=torch.float64)) for s in shards]
              for shards in shards_per_rank]
    for ps, shards in zip(params, shards_per_rank):
        for p, s in zip(ps, shards):
            p.grad = s.detach().double().clone()
    norm = torch.nn.utils.clip_grad_norm_([p for ps in params for p in ps], max_norm)
    return float(norm), [[p.grad for p in ps] for ps in params]


def _norm_hint(got: float, local_norms: Sequence[float]) -> str:
    n = len(local_norms)
    candidates = {
        "the mean of the shard norms": sum(local_norms) / n,
        "the sum of the shard norms": sum(local_norms),
        "sqrt(mean of squared shard norms), i.e. divided by N": math.sqrt(sum(v * v for v in local_norms) / n),
    }
    if any(math.isclose(got, v, rel_tol=1e-4) for v in local_norms):
        return (" It equals a local shard norm: each shard holds only part of the gradient, so "
                "all-reduce (SUM) the squared local norms and take the square root.")
    for what, value in candidates.items():
        if math.isclose(got, value, rel_tol=1e-4):
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
    exp_norm, exp_shards = clipped_by_torch(shards_per_rank, max_norm)
    local_norms = [math.sqrt(sum(float(s.double().pow(2).sum()) for s in shards)) for shards in shards_per_rank]
    below = max_norm >= exp_norm
    case = f"N={len(members)}, max_norm={max_norm:g}, global norm={exp_norm:.4g}"
    norms = []
    for g, rank in enumerate(members):
        norm = results[rank]["norm"]
        if not isinstance(norm, torch.Tensor) or norm.numel() != 1:
            raise AssertionError(f"[{case}] rank {rank} returned {norm!r}; return the global norm as a "
                                 f"0-dim tensor, like clip_grad_norm_."[:400])
        value = float(norm)
        norms.append(value)
        if not math.isclose(value, exp_norm, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"[{case}] rank {rank} returned norm {value:.6g}, expected the global "
                                 f"2-norm {exp_norm:.6g}.{_norm_hint(value, local_norms)}")
        for k, (got, exp) in enumerate(zip(results[rank]["shards"], exp_shards[g])):
            if torch.allclose(got.double(), exp, atol=atol, rtol=rtol):
                continue
            if torch.equal(got.double(), shards_per_rank[g][k].double()) and not below:
                hint = " The shard is unchanged: scale the given tensors in place (mul_), do not rebind them."
            elif below:
                hint = (" The global norm is below max_norm, so the coefficient max_norm / (norm + 1e-6) "
                        "must be clamped to 1.0: never scale gradients up.")
            else:
                hint = " Multiply every shard by the same coefficient, max_norm / (global_norm + 1e-6)."
            diff = float((got.double() - exp).abs().max())
            raise AssertionError(f"[{case}] rank {rank}, shard {k}: max |diff| {diff:.3g} from the gradient "
                                 f"clip_grad_norm_ produces on the full model.{hint}")
    if len(set(norms)) > 1:
        raise AssertionError(f"[{case}] ranks returned different norms {norms}: every rank must see the same "
                             f"global norm.")


def assert_matches_replicated(results: Sequence[Mapping[str, Any]], expected_ranges: Sequence[Sequence[int]],
                              atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Check :func:`sharded_versus_replicated_on_rank`: owned part equals the replicated clipped slice."""
    for rank, out in enumerate(results):
        start, stop = out["range"]
        if (start, stop) != tuple(expected_ranges[rank]):
            raise AssertionError(f"rank {rank}: owned_range gave {(start, stop)}, expected "
                                 f"{tuple(expected_ranges[rank])}.")
        got_norm, ref_norm = float(out["norm"]), float(out["replicated_norm"])
        if not math.isclose(got_norm, ref_norm, rel_tol=rtol, abs_tol=atol):
            raise AssertionError(f"rank {rank}: sharded global norm {got_norm:.6g}, but clip_grad_norm_ on the "
                                 f"DistributedDataParallel gradient gives {ref_norm:.6g}.")
        shard = out["shard"].detach().reshape(-1)
        real, pad = shard[:stop - start], shard[stop - start:]
        if real.shape != out["replicated_owned"].shape or not torch.allclose(
                real.double(), out["replicated_owned"].double(), atol=atol, rtol=rtol):
            raise AssertionError(f"rank {rank}: the owned, clipped gradient elements [{start}, {stop}) differ "
                                 f"from the replicated run (DistributedDataParallel, then clip_grad_norm_).")
        if pad.numel() and bool(pad.ne(0).any()):
            raise AssertionError(f"rank {rank}: the padding positions of the shard are not zero.")


def assert_zero2_training(per_rank: Sequence[Mapping[str, Any]], expected: Sequence[Mapping[str, torch.Tensor]],
                          what: str, atol: float = 2e-5, rtol: float = 1e-4) -> None:
    """After every step the members' parameters are bit-identical and equal ``expected`` (float64 replicated)."""
    for step, reference in enumerate(expected, start=1):
        checks.assert_same_on_all_ranks([r["params"][step - 1] for r in per_rank], f"{what}, step {step}: parameters")
        diff = checks.first_difference(per_rank[0]["params"][step - 1], reference, atol=atol, rtol=rtol)
        if diff is not None:
            raise AssertionError(
                f"{what}: after step {step} the parameters differ from replicated training (one process, float64: "
                f"mean loss over the full batch, clip_grad_norm_ when max_norm is set, then the optimizer that "
                f"make_optimizer builds): {diff}. The reduced gradient is the mean over the group's ranks; the "
                f"clip coefficient needs the norm of the whole gradient, which no rank holds; the optimizer's "
                f"state must persist from step to step.")


def assert_zero2_held_bytes(per_rank: Sequence[Mapping[str, Any]], spec: OptimizerSpec, what: str) -> None:
    """After every step each member's optimizers keep at most ``4 s ceil(P/N)`` bytes of state and the
    object at most :func:`zero2_budget_bytes` of tensors in all (see :func:`held_tensor_bytes`)."""
    n, numel = len(per_rank), per_rank[0]["numel"]
    budget, s = zero2_budget_bytes(numel, n, spec), state_tensors_per_element(spec)
    share = 4 * s * math.ceil(numel / n)
    for rank, r in enumerate(per_rank):
        for step, kept in enumerate(r["held_bytes"], start=1):
            where = f"{what}, group rank {rank}, after step {step}"
            if kept["state"] > share:
                raise AssertionError(
                    f"{where}: the optimizers you built keep {kept['state']} bytes of state; the budget is "
                    f"4 x {s} x ceil({numel} / {n}) = {share} bytes, an equal share. Giving each rank whole "
                    f"parameters does not fit when one parameter is larger than P/N: the owner boundaries "
                    f"must cut through parameters.")
            if kept["held"] > budget:
                raise AssertionError(
                    f"{where}: the optimizer keeps {kept['held']} bytes of tensors (those it reaches, their .grad, "
                    f"and the parameters' .grad); the budget is 4 x ceil({numel} / {n}) x (2 + {s}) = {budget} "
                    f"bytes. The full gradient alone is 4 x {numel} bytes: once it is reduced, a rank keeps only "
                    f"the ceil(P/N) elements it owns and lets the rest go (p.grad = None).")


OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")


def zero2_step_bytes_limit(numel: int, world_size: int) -> float:
    """Ring bytes a rank may send per step: one all-reduce of the padded fp32 model, plus 64."""
    return 2 * (world_size - 1) / world_size * 4 * world_size * math.ceil(numel / world_size) + 64


def _step_segments(ledger: Any, rank: int, num_steps: int, what: str) -> list[list[Any]]:
    """The records of each training step of :func:`zero2_train_on_rank`, split at the driver's barriers."""
    segments: list[list[Any]] = [[]]
    for record in ledger.records[rank]:
        if record.op == "barrier":
            segments.append([])
        else:
            segments[-1].append(record)
    if len(segments) != num_steps + 2:
        raise AssertionError(f"{what}, rank {rank}: expected the driver's {num_steps + 1} barriers in the ledger, "
                             f"found {len(segments) - 1}: the optimizer must not call barrier()")
    return segments[1:-1]


def assert_zero2_communication(ledger: Any, members: Sequence[int], numel: int, num_steps: int, what: str) -> None:
    """Per step: tensor collectives only, no all-reduce of more than one element, at most
    :func:`zero2_step_bytes_limit` ring bytes sent."""
    n = len(members)
    limit = zero2_step_bytes_limit(numel, n)
    for rank in members:
        for step, records in enumerate(_step_segments(ledger, rank, num_steps, what), start=1):
            where = f"{what}, rank {rank}, step {step}"
            for r in records:
                if r.op in OBJECT_COLLECTIVES:
                    raise AssertionError(f"{where}: {r.op} pickles Python objects; use tensor collectives only.")
                if r.op == "all_reduce" and r.numel > 1:
                    raise AssertionError(
                        f"{where}: {r.describe()}. An all-reduce of {r.numel} elements hands every rank the whole "
                        f"reduced tensor; ZeRO-2 gives each rank only the gradient slice it owns, and the one "
                        f"number every rank needs in full (for the clip) is a scalar.")
            sent = sum(r.ring_bytes for r in records)
            if sent > limit:
                raise AssertionError(
                    f"{where}: {sent:,.0f} ring bytes sent ({', '.join(r.describe() for r in records[:4])}"
                    f"{', ...' if len(records) > 4 else ''}); at most {limit:,.0f} allowed, the bytes of one "
                    f"all-reduce of the padded model plus 64. Gathering every rank's whole gradient sends N - 1 "
                    f"gradients; each element of the gradient only needs to reach its owner.")


def zero2_mismatch(args: tuple[int, int, int], got: Any, expected: float) -> str | None:
    """Why ``got`` is not ``expected`` bytes for ``zero2_memory_bytes(*args)`` (``None`` when it is)."""
    if not _is_number(got):
        return f"zero2_memory_bytes{args} returned {got!r}; return a number of bytes."[:300]
    if math.isclose(got, expected, rel_tol=1e-9, abs_tol=1e-9):
        return None
    psi, n, k = args
    return (f"zero2_memory_bytes(num_params={psi}, world_size={n}, k={k}) returned {got!r}, "
            f"expected 2Ψ + (2+K)Ψ/N = {expected!r}.")


def assert_zero2_memory(fn: Callable[[int, int, int], Any], cases: Sequence[tuple[int, int, int, float]]) -> None:
    """``fn(num_params, N, k)`` is the ``expected`` bytes of every case ``(num_params, N, k, expected)``."""
    for psi, n, k, expected in cases:
        message = zero2_mismatch((psi, n, k), fn(psi, n, k), expected)
        if message:
            raise AssertionError(message)


# --------------------------------------------------------------------------- chapter: figures and explorer


def plot_shard_norms(local_norms: Sequence[float], global_norm: float, reference_norm: float | None = None,
                     *, title: str = "Local shard norms vs the global gradient norm") -> Figure:
    """Bars: each rank's local shard norm; lines: the true global norm and two wrong combinations.

    ``global_norm`` is the norm every rank agreed on (as measured); ``reference_norm``
    (optional) is ``clip_grad_norm_`` on the unsharded gradient, drawn as a marker so the
    reader sees the two agree. Norms are in gradient units.
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


STAGE_NAMES = ("stage 0: replicated (2+2+K)Ψ", "stage 1: shard optimizer state 4Ψ + KΨ/N",
               "stage 2: + shard gradients 2Ψ + (2+K)Ψ/N")


def plot_stage_memory(num_params: float, k: int, world_sizes: Sequence[int], stage_bytes: Sequence[Sequence[float]],
                      *, marked: Mapping[int, float] | None = None) -> Figure:
    """Persistent bytes per rank for ZeRO stages 0, 1, 2 against N, as given (stored) numbers.

    ``stage_bytes[s][i]`` is stage ``s``'s bytes per rank on ``world_sizes[i]`` ranks for
    ``num_params`` parameters and ``k`` optimizer bytes per parameter; stages beyond 2 are
    ignored. ``marked`` maps world sizes to bytes to overlay as markers. The dotted line is
    stage 2's floor, the 2Ψ bytes of fp16 parameters.
    """
    if not world_sizes or min(world_sizes) < 1 or len(stage_bytes) < 3:
        raise ValueError("need world sizes >= 1 and the bytes of stages 0, 1 and 2")
    fig = Figure(figsize=(7.5, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for stage, (label, color) in enumerate(zip(STAGE_NAMES, ("#7f7f7f", "#1f77b4", "#d62728"))):
        ax.plot(world_sizes, stage_bytes[stage], marker="o", ms=3, color=color, label=label)
    ax.axhline(2 * num_params, color="#d62728", ls=":", lw=1, label="2Ψ: fp16 parameters (stage 2 floor)")
    for n, value in (marked or {}).items():
        ax.plot([n], [value], "o", ms=10, mfc="none", mew=2, color="k", label=f"N = {n}: {_gb(value)} per rank")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, max(stage_bytes[0]) * 1.08)
    ax.yaxis.set_major_formatter(FuncFormatter(_gb))
    ax.set_xlabel("world size N (data-parallel ranks)")
    ax.set_ylabel("model-state bytes per rank")
    ax.set_title(f"Mixed-precision Adam, Ψ = {num_params / 1e9:.3g} B parameters, K = {k}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="center right")
    return fig


def gradient_sharding_explorer(num_params: float = 7.5e9, world_size: int = 64, k: int = 12):
    """Sliders for Ψ, N and K over the stored grid ``06_explorer``: bytes per rank and traffic per step.

    For every grid value of Ψ (parameters), N (ranks) and K (optimizer bytes per parameter)
    the stored grid holds the bytes per rank of stages 0-2 and one step's ring traffic per
    rank with fp16 messages: stage 2's reduce-scatter and all-gather, stage 0's all-reduce.
    The arguments must be grid values. Returns an ``ipywidgets.VBox`` with an ``update()``
    method that looks up, redraws and returns the numbers (so it also works headless).
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    grid = load("06_explorer")
    style, layout = {"description_width": "140px"}, W.Layout(width="520px")

    def slider(description: str, options: Sequence[float], value: float, label: Callable[[float], str]) -> Any:
        chosen = [o for o in options if math.isclose(o, value, rel_tol=1e-9)]
        if not chosen:
            raise ValueError(f"{description}={value!r} is not on the stored grid; choose one of {list(options)}")
        return W.SelectionSlider(options=[(label(o), o) for o in options], value=chosen[0], description=description,
                                 style=style, layout=layout, continuous_update=False)

    controls = {"num_params": slider("parameters Ψ", grid["num_params"], num_params, lambda v: f"{v:.3g}"),
                "world_size": slider("world size N", grid["world_sizes"], world_size, str),
                "k": slider("optimizer bytes K", grid["ks"], k, str)}
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, float]:
        p = grid["num_params"].index(controls["num_params"].value)
        n = grid["world_sizes"].index(controls["world_size"].value)
        kk = grid["ks"].index(controls["k"].value)
        stage_bytes = grid["stage_bytes"][p][kk]
        traffic = grid["traffic_bytes"][p][n]
        result = {f"stage{s}_bytes": stage_bytes[s][n] for s in range(3)} | traffic
        summary.value = (
            f"<b>per rank</b>: stage 0 {_gb(result['stage0_bytes'])} · stage 1 {_gb(result['stage1_bytes'])} · "
            f"<b>stage 2 {_gb(result['stage2_bytes'])}</b><br>"
            f"<b>traffic per step</b> (fp16, ring): reduce-scatter {_gb(result['reduce_scatter_bytes'])} + "
            f"all-gather {_gb(result['all_gather_bytes'])} = all-reduce {_gb(result['all_reduce_bytes'])}")
        fig = plot_stage_memory(controls["num_params"].value, controls["k"].value, grid["world_sizes"], stage_bytes,
                                marked={controls["world_size"].value: result["stage2_bytes"]})
        show_figures(out, [fig], dpi=90)
        box.last_result = result
        return result

    for w in controls.values():
        w.observe(update, names="value")
    box = W.VBox([*controls.values(), summary, out])
    box.controls = controls
    box.update = update
    update()
    return box
