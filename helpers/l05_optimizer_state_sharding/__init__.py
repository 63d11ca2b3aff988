"""Lesson 05, optimizer-state sharding: rank-side drivers, checks, figure and explorer.

* **PyTorch's own implementation**: :func:`zero_optimizer_class` imports
  ``torch.distributed.optim.ZeroRedundancyOptimizer`` quickly and quietly, and
  :func:`zero_train_on_rank` trains with it on a gloo group, for the visible tests to
  compare against;
* **rank-side drivers** (``*_on_rank``): run inside :func:`helpers.runtime.cluster.run`, call a
  student's function or optimizer the way the assignment's contract says, and return plain
  tensors; :func:`persistent_tensor_bytes` measures what an optimizer object really holds;
  :func:`flat_train_on_rank` drives the design exercise's equal-shard optimizer and marks its
  steps in the communication ledger;
* **checks** (``assert_*``) that compare given results with given expected values and raise
  :class:`AssertionError` with messages that teach;
* the chapter's figure (:func:`plot_zero_memory`) and explorer (:func:`memory_explorer`),
  drawn from the results stored with the course (:mod:`helpers.shared.stored`).

The single-process float64 Adam reference, the partition rule and the memory calculator
live on the instructor's side (``autograder.lessons.l05``); the visible tests read their
expected values from stored results (:func:`stored_adam`).

Units: memory and communication in bytes, sizes in elements (``numel``). The optimizer
state of fp32 Adam is ``exp_avg`` + ``exp_avg_sq``: 8 bytes per element; the step counter
(a Python number or a 0-dim tensor) is not counted.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter
from torch import nn

from helpers.shared.data import tensors_from_json
from helpers.shared.models import shard_batch
from helpers.shared.plots import COLORS, format_bytes
from helpers.shared.state import mse, state_of
from helpers.shared.stored import load

__all__ = [
    "ADAM_STATE_BYTES_PER_ELEMENT", "Moments", "zero_optimizer_class", "moments_by_name", "zero_train_on_rank",
    "stored_adam", "persistent_tensor_bytes", "partition_on_rank", "sharded_train_on_rank", "assert_partition",
    "assert_partition_balanced", "assert_sharded_training", "assert_matches_zero", "assert_state_memory",
    "assert_in_place", "assert_consolidated", "flat_train_on_rank", "flat_state_budget_bytes",
    "assert_flat_training", "assert_flat_state_memory", "assert_flat_collectives", "plot_zero_memory",
    "memory_explorer",
]

ADAM_STATE_BYTES_PER_ELEMENT = 8  # fp32 exp_avg + exp_avg_sq
STORED_REFERENCES = "05_visible_references"
STORED_MEMORY = "05_zero_memory"
STORED_EXPLORER = "05_memory_explorer"
Batch = tuple[torch.Tensor, torch.Tensor]
State = dict[str, torch.Tensor]
Moments = dict[str, tuple[torch.Tensor, torch.Tensor, float]]  # name -> (exp_avg, exp_avg_sq, step)


# --------------------------------------------------------------------------- ZeroRedundancyOptimizer


def zero_optimizer_class() -> type:
    """``torch.distributed.optim.ZeroRedundancyOptimizer``, imported quietly and quickly.

    Importing ``torch.distributed.optim`` runs ``torch.jit.script`` on a dozen functional
    optimizers (used only by ``overlap_with_ddp``, which the course never uses): about 4 s
    per rank process on a busy 2-core machine, and a DeprecationWarning for each that a
    rank would echo into the notebook. Scripting is switched off for the import only.
    """
    from torch.jit import _state as jit_state

    was_enabled = bool(jit_state._enabled.enabled)
    jit_state.disable()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from torch.distributed.optim import ZeroRedundancyOptimizer
    finally:
        if was_enabled:
            jit_state.enable()
    return ZeroRedundancyOptimizer


def moments_by_name(state: Mapping[Any, Mapping[str, Any]], names: Mapping[int, str]) -> Moments:
    """Copies of ``exp_avg``, ``exp_avg_sq`` and ``step`` of an Adam-style ``state``, keyed by parameter name.

    ``names`` maps ``id(parameter)`` to its name; a key that is not a model parameter is named
    by its shape, so that a check can say what it is.
    """
    out: Moments = {}
    for key, s in state.items():
        name = names.get(id(key), f"<not a model parameter: {tuple(getattr(key, 'shape', ()))}>")
        out[name] = (s["exp_avg"].detach().clone(), s["exp_avg_sq"].detach().clone(), float(s["step"]))
    return out


def zero_train_on_rank(
    model_fn: Callable[[], nn.Module], batches: Sequence[Batch], hyper: Mapping[str, Any],
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """Train ``model_fn()`` with ZeroRedundancyOptimizer(Adam) on this rank's shards.

    Before each ``step()`` every gradient is all-reduced with ``ReduceOp.AVG`` over
    ``group``, which is what DDP would hand ZeRO. Returns this rank's ``params`` (state dict
    copy) and ``moments`` (the Adam state of the parameters this rank owns, by name).
    """
    model = model_fn()
    names = {id(p): n for n, p in model.named_parameters()}
    zero = zero_optimizer_class()(model.parameters(), optimizer_class=torch.optim.Adam,
                                  process_group=group, **hyper)
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, n)
        zero.zero_grad(set_to_none=True)
        mse(model(xs), ys).backward()
        for grad in (p.grad for p in model.parameters() if p.grad is not None):
            dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=group)
        zero.step()
    return {"params": state_of(model), "moments": moments_by_name(zero.optim.state, names)}


def stored_adam(case: str) -> tuple[State, Moments]:
    """The stored single-process float64 Adam result of visible test ``case``: (parameters, moments)."""
    data = load(STORED_REFERENCES)[case]
    moments = tensors_from_json(data["moments"])
    return tensors_from_json(data["params"]), {
        name: (moments[f"{name}.exp_avg"], moments[f"{name}.exp_avg_sq"], float(step))
        for name, step in data["steps"].items()}


# --------------------------------------------------------------------------- measuring an optimizer


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def persistent_tensor_bytes(obj: Any, exclude: Iterable[torch.Tensor] = (), max_depth: int = 8) -> int:
    """Bytes of tensor storage reachable from ``obj``'s attributes, each storage once.

    Walks attributes, dicts (keys and values), lists, tuples and sets up to ``max_depth``
    levels. Storages shared with a tensor in ``exclude`` (the parameters and their
    gradients) and 0-dim tensors (step counters) are not counted; modules and process
    groups are not entered. A view into a larger buffer counts the whole buffer.
    """
    excluded = {_storage_key(t) for t in exclude if t is not None}
    seen_objects: set[int] = set()
    counted: dict[int, int] = {}

    def visit(value: Any, depth: int) -> None:
        if depth > max_depth or id(value) in seen_objects:
            return
        seen_objects.add(id(value))
        if isinstance(value, torch.Tensor):
            if value.dim() > 0 and _storage_key(value) not in excluded:
                counted[_storage_key(value)] = value.untyped_storage().nbytes()
            return
        if isinstance(value, (nn.Module, str, bytes, int, float, bool)) or value is None:
            return
        if isinstance(value, Mapping):
            for k, v in value.items():
                visit(k, depth + 1)
                visit(v, depth + 1)
        elif isinstance(value, (list, tuple, set, frozenset)):
            for v in value:
                visit(v, depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, dist.ProcessGroup):
            visit(vars(value), depth + 1)

    visit(obj, 0)
    return sum(counted.values())


# --------------------------------------------------------------------------- rank-side drivers


def partition_on_rank(partition_fn: Callable[[list[int], int], list[int]], numels: Sequence[int]) -> list[int]:
    """Call ``partition_fn(numels, world_size)`` on this rank; return its owners as a list."""
    return list(partition_fn(list(numels), dist.get_world_size()))


def _identity_probe(model: nn.Module) -> dict[str, Any]:
    params = list(model.parameters())
    return {"ids": [id(p) for p in params], "ptrs": [p.data_ptr() for p in params],
            "aliases": [p.detach() for p in params]}


def sharded_train_on_rank(
    optimizer_cls: type,
    model_fn: Callable[[], nn.Module],
    batches: Sequence[Batch],
    hyper: Mapping[str, Any],
    group_ranks: Sequence[int] | None = None,
    with_zero: bool = False,
    consolidate: bool = False,
) -> dict[str, Any] | None:
    """Train with ``optimizer_cls(model.parameters(), **hyper, group=group)`` on this rank.

    One step per global batch on this rank's shard (by group rank): ``zero_grad()``,
    local mean-loss ``backward()``, ``step()``. With ``group_ranks`` a subgroup is created
    on every rank and ranks outside it return ``None``. Returns a dict with ``params``,
    ``moments`` (this rank's ``opt.state`` by parameter name), ``state_bytes`` (what
    ``opt.state_bytes()`` reports), ``held_bytes`` (:func:`persistent_tensor_bytes`),
    ``identity`` (parameter ids, data pointers and earlier aliases before and after),
    ``grads_cleared`` (all ``.grad`` None after a final ``zero_grad()``), and optionally
    ``zero`` (:func:`zero_train_on_rank` on the same group) and ``consolidated``.
    """
    group = None if group_ranks is None else dist.new_group(list(group_ranks))
    if group_ranks is not None and dist.get_rank() not in group_ranks:
        return None
    model = model_fn()
    names = {id(p): n for n, p in model.named_parameters()}
    before = _identity_probe(model)
    init = state_of(model)
    opt = optimizer_cls(model.parameters(), **hyper, group=group)
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, n)
        opt.zero_grad()
        mse(model(xs), ys).backward()
        opt.step()
    params = list(model.parameters())
    held = persistent_tensor_bytes(opt, [*params, *(p.grad for p in params)])
    after = _identity_probe(model)
    result = {
        "params": state_of(model), "init": init, "moments": moments_by_name(opt.state, names),
        "state_bytes": opt.state_bytes(), "held_bytes": held,
        "numels": {name: p.numel() for name, p in model.named_parameters()},
        "identity": {
            "ids_kept": before["ids"] == after["ids"],
            "ptrs_kept": before["ptrs"] == after["ptrs"],
            "aliases_see_update": all(torch.equal(a, p.detach()) for a, p in zip(before["aliases"], params)),
        },
    }
    if consolidate:
        result["consolidated"] = opt.consolidated_state_dict()
    opt.zero_grad()
    result["grads_cleared"] = all(p.grad is None for p in params)
    if with_zero:
        result["zero"] = zero_train_on_rank(model_fn, batches, hyper, group)
    return result


def flat_train_on_rank(
    optimizer_cls: type,
    model_fn: Callable[[], nn.Module],
    batches: Sequence[Batch],
    hyper: Mapping[str, Any],
    group_ranks: Sequence[int] | None = None,
) -> dict[str, Any] | None:
    """Train with ``optimizer_cls(model.parameters(), **hyper, group=group)``, the design exercise's driver.

    As :func:`sharded_train_on_rank` (one step per global batch on this rank's shard, a
    subgroup with ``group_ranks``), but reads no per-parameter state. A ``dist.barrier`` on
    the group after the constructor and after each ``step()`` marks in the ledger where
    each part's collectives end. Returns ``params``, ``init``, ``numels``, ``held_bytes``
    (:func:`persistent_tensor_bytes`), ``identity`` and ``grads_cleared``.
    """
    group = None if group_ranks is None else dist.new_group(list(group_ranks))
    if group_ranks is not None and dist.get_rank() not in group_ranks:
        return None
    model = model_fn()
    before = _identity_probe(model)
    init = state_of(model)
    opt = optimizer_cls(model.parameters(), **hyper, group=group)
    dist.barrier(group=group)
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    for x, y in batches:
        xs, ys = shard_batch(x, y, rank, n)
        opt.zero_grad()
        mse(model(xs), ys).backward()
        opt.step()
        dist.barrier(group=group)
    params = list(model.parameters())
    held = persistent_tensor_bytes(opt, [*params, *(p.grad for p in params)])
    after = _identity_probe(model)
    result = {
        "params": state_of(model), "init": init, "held_bytes": held,
        "numels": {name: p.numel() for name, p in model.named_parameters()},
        "identity": {
            "ids_kept": before["ids"] == after["ids"],
            "ptrs_kept": before["ptrs"] == after["ptrs"],
            "aliases_see_update": all(torch.equal(a, p.detach()) for a, p in zip(before["aliases"], params)),
        },
    }
    opt.zero_grad()
    result["grads_cleared"] = all(p.grad is None for p in params)
    return result


# --------------------------------------------------------------------------- checks


def _greedy_load(numels: Sequence[int], owners: Sequence[int], world_size: int) -> list[int]:
    load = [0] * world_size
    for n, r in zip(numels, owners):
        load[r] += n
    return load


def assert_partition(per_rank: Sequence[Sequence[int]], numels: Sequence[int], expected: Sequence[int],
                     world_size: int | None = None) -> None:
    """Every rank returned the same owner list, and it equals ``expected`` (ZeRO's).

    ``world_size`` is the number of ranks the owners are for (default: one list per rank).
    """
    world_size = len(per_rank) if world_size is None else world_size
    for rank, owners in enumerate(per_rank):
        if len(owners) != len(numels):
            raise AssertionError(f"rank {rank}: {len(owners)} owners for {len(numels)} parameters")
        bad = [o for o in owners if not isinstance(o, int) or not 0 <= o < world_size]
        if bad:
            raise AssertionError(f"rank {rank}: owners must be ints in [0, {world_size}), got {bad[:3]}")
    for rank in range(1, len(per_rank)):
        if list(per_rank[rank]) != list(per_rank[0]):
            raise AssertionError(
                f"rank {rank} computed owners {list(per_rank[rank])} but rank 0 computed {list(per_rank[0])}. "
                "The partition must be a pure function of (numels, world_size): no randomness, no "
                "dependence on dist.get_rank(). Ranks that disagree on ownership skip updates or "
                "apply them twice.")
    owners = list(per_rank[0])
    if owners != list(expected):
        raise AssertionError(
            f"numels={list(numels)}, world_size={world_size}: expected owners {list(expected)} "
            f"(loads {_greedy_load(numels, expected, world_size)} elements), got {owners} "
            f"(loads {_greedy_load(numels, owners, world_size)}). Rule: visit parameters by numel, "
            "largest first (equal numels in registration order); give each to the rank with the fewest "
            "elements so far (ties: lowest rank).")


def assert_partition_balanced(owners: Sequence[int], numels: Sequence[int], world_size: int) -> None:
    """The greedy bound: max load - min load <= the largest parameter's numel."""
    load = _greedy_load(numels, owners, world_size)
    if max(load) - min(load) > max(numels):
        raise AssertionError(f"loads {load} elements per rank: spread {max(load) - min(load)} exceeds the largest "
                             f"parameter ({max(numels)}), which largest-first greedy never does")


def _close(a: torch.Tensor, b: torch.Tensor, atol: float, rtol: float) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol)


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max()) if a.shape == b.shape and a.numel() else math.inf


def _assert_params_close(ours: State, expected: State, init: State, what: str, atol: float, rtol: float) -> None:
    for name, exp in expected.items():
        got = ours[name]
        if _close(got, exp, atol, rtol):
            continue
        hint = ""
        if name in init and torch.equal(got, init[name]) and not torch.equal(exp.to(got.dtype), init[name]):
            hint = (" This rank's copy never moved: parameters owned by another rank must be sent to "
                    "every rank after the owner's update (broadcast from the owner, or all-gather).")
        raise AssertionError(f"{what}: parameter {name!r} differs by {_max_diff(got, exp):.3g} "
                             f"(atol={atol:g}, rtol={rtol:g}).{hint}")


def _union_of_moments(per_rank: Sequence[Moments]) -> Moments:
    union: Moments = {}
    for rank, moments in enumerate(per_rank):
        for name, m in moments.items():
            if name in union:
                raise AssertionError(f"parameter {name!r} has optimizer state on two ranks (rank {rank} and an "
                                     "earlier one): each parameter's state must live on its owner only")
            union[name] = m
    return union


def _assert_moments_close(ours: Moments, expected: Moments, what: str, atol: float, rtol: float) -> None:
    missing, extra = sorted(set(expected) - set(ours)), sorted(set(ours) - set(expected))
    if missing or extra:
        raise AssertionError(f"{what}: Adam state for the wrong parameters: missing {missing}, unexpected {extra}")
    for name, (m, v, step) in expected.items():
        om, ov, ostep = ours[name]
        if ostep != step:
            raise AssertionError(f"{what}: {name!r} has step {ostep:g}, expected {step:g}")
        for label, got, exp in (("exp_avg", om, m), ("exp_avg_sq", ov, v)):
            if not _close(got, exp, atol, rtol * 10):
                raise AssertionError(f"{what}: {label} of {name!r} differs by {_max_diff(got, exp):.3g}. "
                                     "If exp_avg is off, check that the owner steps with the gradient "
                                     "averaged over the group, not its local one.")


def _assert_replicas_identical(per_rank: Sequence[Mapping[str, Any]]) -> None:
    for rank in range(1, len(per_rank)):
        for name, t in per_rank[0]["params"].items():
            if not torch.equal(per_rank[rank]["params"][name], t):
                raise AssertionError(
                    f"after training, rank {rank}'s {name!r} differs from rank 0's by "
                    f"{_max_diff(per_rank[rank]['params'][name], t):.3g}: replicas must be bit-identical. "
                    "Only the owner updates a parameter; every other rank must receive the result.")


def assert_sharded_training(
    per_rank: Sequence[Mapping[str, Any] | None], expected: tuple[State, Moments], what: str,
    atol: float = 2e-5, rtol: float = 1e-4,
) -> None:
    """Replicas identical, parameters and (union of) moments match single-process Adam."""
    results = [r for r in per_rank if r is not None]
    _assert_replicas_identical(results)
    exp_params, exp_moments = expected
    for rank, r in enumerate(results):
        _assert_params_close(r["params"], exp_params, r["init"], f"{what}, rank {rank}", atol, rtol)
    _assert_moments_close(_union_of_moments([r["moments"] for r in results]), exp_moments, what, atol, rtol)


def assert_matches_zero(per_rank: Sequence[Mapping[str, Any]], what: str,
                        atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """On every rank: same parameters as ZeroRedundancyOptimizer and the same owned moments."""
    for rank, r in enumerate(per_rank):
        zero = r["zero"]
        for name, t in zero["params"].items():
            if not _close(r["params"][name], t, atol, rtol):
                raise AssertionError(f"{what}, rank {rank}: {name!r} differs from ZeroRedundancyOptimizer's by "
                                     f"{_max_diff(r['params'][name], t):.3g}")
        ours, theirs = set(r["moments"]), set(zero["moments"])
        if ours != theirs:
            raise AssertionError(
                f"{what}, rank {rank}: this rank holds Adam state for {sorted(ours)}, "
                f"ZeroRedundancyOptimizer's rank {rank} for {sorted(theirs)}: same partition rule, same owners")
        _assert_moments_close(r["moments"], zero["moments"], f"{what}, rank {rank} vs ZeroRedundancyOptimizer",
                              atol, rtol)


def assert_state_memory(per_rank: Sequence[Mapping[str, Any]], owners: Sequence[int], what: str) -> None:
    """state_bytes() is true (what the optimizer holds) and counts owned parameters only.

    ``owners`` is the expected partition over the model's parameters in order. Each rank must
    hold, and report, 8 bytes per element it owns; summed over the ranks that is 8 Psi, what
    replicated Adam holds on every rank.
    """
    numels = list(per_rank[0]["numels"].values())
    replicated = ADAM_STATE_BYTES_PER_ELEMENT * sum(numels)
    for rank, r in enumerate(per_rank):
        owned = sum(n for n, o in zip(numels, owners) if o == rank)
        expected = ADAM_STATE_BYTES_PER_ELEMENT * owned
        reported, held = r["state_bytes"], r["held_bytes"]
        if held > expected:
            raise AssertionError(
                f"{what}, rank {rank}: the optimizer object holds {held} bytes of tensors besides the "
                f"parameters and gradients, but the {owned} elements this rank owns need only {expected} "
                f"(8 bytes each; replicated Adam would hold {replicated}). Allocate exp_avg/exp_avg_sq "
                "for owned parameters only, and keep no other persistent tensors.")
        if reported != expected:
            raise AssertionError(
                f"{what}, rank {rank}: state_bytes() returned {reported}, expected {expected} = 8 bytes x "
                f"{owned} owned elements (measured held: {held}; replicated Adam: {replicated}).")


def assert_in_place(per_rank: Sequence[Mapping[str, Any]], what: str) -> None:
    """Parameters kept their identity and storage; aliases taken earlier see the update."""
    for rank, r in enumerate(per_rank):
        ident = r["identity"]
        if not ident["ids_kept"]:
            raise AssertionError(f"{what}, rank {rank}: model.parameters() are different objects after "
                                 "training. Update parameters in place.")
        if not (ident["ptrs_kept"] and ident["aliases_see_update"]):
            raise AssertionError(
                f"{what}, rank {rank}: a reference to a parameter's tensor taken before training "
                "(p.detach(), a flat buffer view, a hook's capture) no longer shows the parameter's value. "
                "Do not rebind p.data or replace tensors: write into them (p.add_, p.copy_, broadcast into p).")
        if all(torch.equal(r["params"][n], r["init"][n]) for n in r["params"]):
            raise AssertionError(f"{what}, rank {rank}: no parameter moved at all")
        if not r["grads_cleared"]:
            raise AssertionError(f"{what}, rank {rank}: zero_grad() must set every parameter's .grad to None")


def assert_consolidated(
    per_rank: Sequence[Mapping[str, Any] | None], param_names: Sequence[str], expected: Moments,
    hyper: Mapping[str, Any], atol: float = 2e-5, rtol: float = 1e-4,
) -> None:
    """Group rank 0 returns a torch.optim.Adam-style state dict of the whole model; others None."""
    results = [r for r in per_rank if r is not None]
    for rank, r in enumerate(results[1:], start=1):
        if r["consolidated"] is not None:
            raise AssertionError(f"group rank {rank} returned {type(r['consolidated']).__name__}: "
                                 "only group rank 0 returns the state dict, the others return None")
    sd = results[0]["consolidated"]
    if not isinstance(sd, Mapping) or set(sd) != {"state", "param_groups"}:
        raise AssertionError("consolidated_state_dict() must return {'state': ..., 'param_groups': [...]} "
                             "on group rank 0")
    groups = sd["param_groups"]
    if len(groups) != 1 or list(groups[0]["params"]) != list(range(len(param_names))):
        raise AssertionError(f"param_groups must be one group with params {list(range(len(param_names)))}")
    for key, value in hyper.items():
        got = groups[0].get(key)
        if ((tuple(got) if isinstance(got, (list, tuple)) else got)
                != (tuple(value) if isinstance(value, (list, tuple)) else value)):
            raise AssertionError(f"param_groups[0][{key!r}] is {got!r}, expected {value!r}")
    by_name = {param_names[i]: (s["exp_avg"], s["exp_avg_sq"], float(s["step"])) for i, s in sd["state"].items()}
    _assert_moments_close(by_name, expected, "consolidated state dict", atol, rtol)
    shapes = [results[0]["params"][name].shape for name in param_names]
    clone = torch.optim.Adam([nn.Parameter(torch.zeros(shape)) for shape in shapes], **hyper)
    try:
        clone.load_state_dict(sd)
    except Exception as exc:  # the message says what torch.optim.Adam could not load
        raise AssertionError(f"torch.optim.Adam.load_state_dict rejects the consolidated dict: {exc}") from exc


def flat_state_budget_bytes(num_params: int, world_size: int) -> int:
    """The design exercise's per-rank budget: two fp32 moments of ceil(num_params / world_size) elements."""
    return ADAM_STATE_BYTES_PER_ELEMENT * math.ceil(num_params / world_size)


def assert_flat_training(per_rank: Sequence[Mapping[str, Any] | None], expected: State, what: str,
                         atol: float = 2e-5, rtol: float = 1e-4) -> None:
    """Replicas bit-identical and every rank's parameters equal the reference ``expected``."""
    results = [r for r in per_rank if r is not None]
    _assert_replicas_identical(results)
    for rank, r in enumerate(results):
        _assert_params_close(r["params"], expected, r["init"], f"{what}, group rank {rank}", atol, rtol)


def assert_flat_state_memory(per_rank: Sequence[Mapping[str, Any] | None], what: str) -> None:
    """Each rank's optimizer holds at most 8 ceil(P/N) bytes of tensors; parameters updated in place."""
    results = [r for r in per_rank if r is not None]
    numels = list(results[0]["numels"].values())
    total, n = sum(numels), len(results)
    budget = flat_state_budget_bytes(total, n)
    for rank, r in enumerate(results):
        if r["held_bytes"] > budget:
            raise AssertionError(
                f"{what}, group rank {rank}: the optimizer holds {r['held_bytes']} bytes of tensors besides the "
                f"parameters and their gradients; the budget is 8 x ceil({total} / {n}) = {budget} bytes "
                f"(parameter sizes {numels}). Two fp32 moments of at most ceil(P/N) elements fit; giving each "
                "rank whole parameters does not when one parameter is larger than a rank's share: its state "
                "must be split between ranks, so shard boundaries cut through parameters.")
    assert_in_place(results, what)


_OBJECT_COLLECTIVES = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")


def _segments_by_barrier(records: Sequence[Any]) -> list[list[Any]]:
    """A rank's collective records split at each ``barrier`` (the barriers dropped)."""
    segments: list[list[Any]] = [[]]
    for record in records:
        if record.op == "barrier":
            segments.append([])
        else:
            segments[-1].append(record)
    return segments


def assert_flat_collectives(ledger: Any, members: Sequence[int], num_steps: int, what: str) -> None:
    """From :func:`flat_train_on_rank`'s ledger: at most N + 2 collectives per training step (``zero_grad``,
    backward, ``step``; the constructor is not counted), none of them an object collective."""
    limit = len(members) + 2
    for rank in members:
        segments = _segments_by_barrier(ledger.records[rank])
        if len(segments) != num_steps + 2:
            raise AssertionError(f"{what}, rank {rank}: expected {num_steps + 1} barriers of the driver in the "
                                 f"ledger, found {len(segments) - 1}: the optimizer must not call barrier()")
        for step, records in enumerate(segments[1:-1], start=1):
            objects = [r.op for r in records if r.op in _OBJECT_COLLECTIVES]
            if objects:
                raise AssertionError(f"{what}, rank {rank}, step {step}: {objects[0]} pickles Python objects; "
                                     "step() may use tensor collectives only")
            if len(records) > limit:
                raise AssertionError(
                    f"{what}, rank {rank}, step {step}: {len(records)} collectives "
                    f"({', '.join(r.describe() for r in records[:4])}, ...), at most N + 2 = {limit} allowed. "
                    "One call per parameter pays the latency of a collective per parameter: communicate "
                    "the model's gradients and parameters as a few flat tensors.")


# --------------------------------------------------------------------------- figure and explorer

_STAGE_LABELS = {0: "stage 0: replicated (2+2+K)Ψ", 1: "stage 1: optimizer states 4Ψ + KΨ/N",
                 2: "stage 2: + gradients 2Ψ + (2+K)Ψ/N", 3: "stage 3: + parameters (4+K)Ψ/N"}
_PART_LABELS = ("fp16 parameters (2Ψ)", "fp16 gradients (2Ψ)", "optimizer state (KΨ)")


def plot_zero_memory(
    curves: Mapping[str, Any], *, budget_bytes: float | None = None,
    measured: Mapping[int, float] | None = None, measured_params: int | None = None,
) -> Figure:
    """Model-state bytes per rank against world size for ZeRO stages 0-3.

    Left: ``curves``, a stored result (``load("05_zero_memory")["curves"]``) with
    ``num_params`` (Psi), ``k`` (optimizer bytes per parameter), ``world_sizes``,
    ``bytes_per_rank[str(stage)]`` (one value per world size) and ``stage1_floor``, log-log,
    with an optional memory ``budget_bytes`` line. Right (when ``measured`` is given):
    optimizer-state bytes per rank measured on a gloo group, ``measured[N]`` = the largest
    rank's bytes for a model of ``measured_params`` fp32 parameters, against the N = 1
    measurement divided by N (``measured`` must include N = 1).
    """
    ns = [int(n) for n in curves["world_sizes"]]
    psi, k, floor = curves["num_params"], curves["k"], curves["stage1_floor"]
    if measured and 1 not in measured:
        raise ValueError("measured needs the N = 1 value (replicated state) to draw the 1/N share")
    fig = Figure(figsize=(11 if measured else 7, 4.2), layout="constrained")
    axes = fig.subplots(1, 2 if measured else 1)
    ax = axes[0] if measured else axes
    for stage in range(4):
        ax.plot(ns, curves["bytes_per_rank"][str(stage)], marker="o", ms=3, color=COLORS[stage],
                label=_STAGE_LABELS[stage])
    ax.axhline(floor, color=COLORS[1], ls=":", lw=1)
    ax.text(ns[-1], floor * 0.93, "stage-1 floor 4Ψ", ha="right", va="top", fontsize=8, color=COLORS[1])
    if budget_bytes:
        ax.axhline(budget_bytes, color="k", ls="--", lw=1, label=f"budget {format_bytes(budget_bytes)}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
    ax.set_xlabel("data-parallel world size N (ranks)")
    ax.set_ylabel("model-state bytes per rank")
    ax.set_title(f"Mixed-precision Adam, Ψ = {psi / 1e9:.3g} B parameters, K = {k}", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    if measured:
        ax2 = axes[1]
        pts = sorted(measured.items())
        replicated = measured[1]
        ax2.plot([n for n, _ in pts], [replicated / n for n, _ in pts], color="k", marker=".",
                 label="an equal share: (N = 1 state) / N")
        ax2.plot([n for n, _ in pts], [b for _, b in pts], "o", ms=9, mfc="none", mew=2, color=COLORS[1],
                 label="measured: largest rank's exp_avg + exp_avg_sq")
        ax2.axhline(replicated, color=COLORS[0], ls=":", lw=1, label="replicated: the whole state on every rank")
        ax2.set_xticks([n for n, _ in pts])
        ax2.set_ylim(0, replicated * 1.1)
        ax2.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
        ax2.set_xlabel("world size N (gloo ranks)")
        ax2.set_ylabel("optimizer-state bytes on the fullest rank")
        ax2.set_title(f"Measured on gloo: ZeroRedundancyOptimizer, Ψ = {measured_params:,} fp32", fontsize=10)
        ax2.grid(True, alpha=0.3)
        ax2.legend(fontsize=8)
    return fig


def memory_explorer(num_params: float = 7.5e9, k: int = 12, world_size: int = 64,
                    budget_gb: float = 32.0) -> Any:
    """Model size Psi, optimizer bytes K, world size N and a device budget (ipywidgets VBox).

    Shows the per-rank bytes of stages 0-3 as stacked bars of parameters, gradients and
    optimizer state (stored result ``05_memory_explorer``, one entry per choice of Psi, K
    and N), against a budget in GB (1 GB = 1e9 B). ``num_params``, ``k`` and
    ``world_size`` must be among the choices. The returned box has ``update()`` (redraw and
    return the numbers as a dict) and ``controls``.
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    grid = load(STORED_EXPLORER)
    sizes, ks, ns = list(grid["num_params"]), list(grid["k"]), list(grid["world_sizes"])
    for name, value, options in (("num_params", num_params, sizes), ("k", k, ks), ("world_size", world_size, ns)):
        if value not in options:
            raise ValueError(f"{name} must be one of {options}, got {value!r}")
    style, layout = {"description_width": "150px"}, W.Layout(width="520px")
    p_choice = W.Dropdown(options=[(f"{psi / 1e9:g} B", psi) for psi in sizes], value=int(num_params),
                          description="parameters Ψ", style=style, layout=layout)
    k_choice = W.Dropdown(options=ks, value=k, description="optimizer bytes K", style=style, layout=layout)
    n_slider = W.SelectionSlider(options=ns, value=world_size, description="world size N", style=style,
                                 layout=layout, continuous_update=False)
    b_slider = W.FloatLogSlider(value=budget_gb, base=10, min=0, max=3, step=0.05, description="budget (GB)",
                                style=style, layout=layout, continuous_update=False, readout_format=".3g")
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        psi, kk, n, budget = int(p_choice.value), int(k_choice.value), int(n_slider.value), b_slider.value * 1e9
        parts = grid["parts"][str(psi)][str(kk)][ns.index(n)]
        per_stage = {s: sum(parts[s]) for s in range(4)}
        fits = [s for s in range(4) if per_stage[s] <= budget]
        summary.value = "<br>".join(
            f"<b>stage {s}</b>: {format_bytes(b)} per rank {'✓ fits' if b <= budget else '✗ too big'}"
            for s, b in per_stage.items()) + \
            f"<br>stage 1 can never go below 4Ψ = {format_bytes(grid['stage1_floor'][str(psi)])}"
        show_figures(out, [_breakdown_figure(parts, psi, kk, n, budget)], dpi=100)
        result = {"num_params": psi, "k": kk, "world_size": n, "budget_bytes": budget,
                  "bytes_per_stage": per_stage, "stages_that_fit": fits}
        box.last_result = result
        return result

    for w in (p_choice, k_choice, n_slider, b_slider):
        w.observe(update, names="value")
    box = W.VBox([p_choice, k_choice, n_slider, b_slider, summary, out])
    box.controls = {"num_params": p_choice, "k": k_choice, "world_size": n_slider, "budget_gb": b_slider}
    box.update = update
    update()
    return box


def _breakdown_figure(parts: Sequence[Sequence[float]], psi: int, k: int, n: int, budget: float) -> Figure:
    """Stacked bars: ``parts[stage]`` = (parameter, gradient, optimizer-state) bytes per rank."""
    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    bottom = [0.0] * 4
    for i, (color, label) in enumerate(zip(COLORS, _PART_LABELS)):
        values = [parts[s][i] for s in range(4)]
        ax.bar(range(4), [v / 1e9 for v in values], bottom=[b / 1e9 for b in bottom], color=color, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.axhline(budget / 1e9, color="k", ls="--", lw=1, label=f"budget {budget / 1e9:.3g} GB")
    ax.set_xticks(range(4), ["0: replicated", "1: P_os", "2: P_os+g", "3: P_os+g+p"])
    ax.set_xlabel("ZeRO stage")
    ax.set_ylabel("GB per rank (1 GB = 1e9 B)")
    ax.set_title(f"Model-state memory per rank: Ψ = {psi / 1e9:.3g} B, K = {k}, N = {n}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return fig
