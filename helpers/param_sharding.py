"""Lesson 07, parameter sharding (FULL_SHARD): a model, a real FSDP2 probe, drivers and checks.

A **unit** is a module whose parameters are stored flat and sharded: the flat vector of its
``n`` parameter elements is padded to ``N * S`` (``S = ceil(n / N)``) and rank ``r`` keeps
elements ``[r*S, (r+1)*S)``, the layout of lesson 06. The assignment builds such a unit and its
training loop; this module only *runs* them on a gloo rank (the drivers) and compares what they
did with the unsharded model, with float64 results of the visible tests' cases stored with the
course (``helpers/stored/07_visible.json``, :func:`stored_expected`) and with the ledger of
collectives.

FSDP2 (``fully_shard``), run by :func:`fsdp2_counts_on_rank`, shards every parameter along
dimension 0 as a DTensor instead, with the same traffic and the same schedule. Sizes are
elements unless a name says bytes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from helpers.checks import first_difference
from helpers.data import tensors_from_json
from helpers.reference import mse, rank_shard, state_of
from helpers.stored import load

Batch = tuple[torch.Tensor, torch.Tensor]
_GATHERS = ("all_gather_single", "all_gather_into_tensor")
_SCATTERS = ("reduce_scatter_single", "reduce_scatter_tensor")
STORED_VISIBLE = "07_visible"


def layered_mlp(widths: Sequence[int] = (6, 10, 7, 3)) -> nn.Sequential:
    """Linear layers with ReLUs between them; the Linear layers (even indices, ``model[::2]``) are the units."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def fsdp2_counts_on_rank(widths: Sequence[int], reshard_after_forward: bool) -> dict[str, Any]:
    """One step of real FSDP2 (``fully_shard`` on every Linear, then the root); return this rank's unit count."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = layered_mlp(widths)
    for unit in model[::2]:
        fully_shard(unit, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    x, y = torch.randn(4, widths[0]), torch.randn(4, widths[-1])
    mse(model(x), y).backward()
    return {"units": len(model[::2])}


# --------------------------------------------------------------------------- drivers (call inside run)


def _held(units: Sequence[Any], modules: Sequence[nn.Module]) -> list[int]:
    """Bytes of full parameters each unit keeps allocated, read from the storages, not from an attribute.

    Per unit: the bytes (``untyped_storage().nbytes()``) of the distinct storages behind its
    module's parameters and its ``full`` buffer. A ``free()`` that only rebinds ``self.full``
    leaves the parameters viewing the old buffer, and its bytes are counted here.
    """
    held = []
    for unit, module in zip(units, modules):
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                    for t in (unit.full, *module.parameters())}
        held.append(sum(storages.values()))
    return held


def unit_step_on_rank(unit_cls: Callable[..., Any], model_fn: Callable[[], nn.Module], batch: Batch) -> dict[str, Any]:
    """Wrap every Linear of ``model_fn()`` in ``unit_cls``; one forward, backward and ``reduce_gradients``.

    Runs on this rank's rows of ``batch``. Returns the shard sizes, the bytes of full parameters
    each unit held after wrapping, while each unit's forward ran, after forward, after backward and
    after every unit's ``reduce_gradients()`` and ``free()``; the output, every unit's
    ``shard.grad`` and whether the module gradients were cleared.
    """
    model = model_fn()
    modules = list(model[::2])
    units = [unit_cls(m) for m in modules]
    record: dict[str, Any] = {"shard_numel": [u.shard.numel() for u in units], "after_init": _held(units, modules),
                              "during_forward": []}
    for m in modules:  # registered after the unit's own hooks: sees what the unit gathered
        m.register_forward_pre_hook(lambda mod, args: record["during_forward"].append(_held(units, modules)))
    x, y = rank_shard(*batch)
    out = model(x)
    record["after_forward"] = _held(units, modules)
    mse(out, y).backward()
    record["after_backward"] = _held(units, modules)
    for u in units:
        u.reduce_gradients()
        u.free()
    record["after_step"] = _held(units, modules)
    record["output"] = out.detach().clone()
    record["grad_shards"] = [None if u.shard.grad is None else u.shard.grad.detach().clone() for u in units]
    record["grads_cleared"] = all(p.grad is None for p in model.parameters())
    return record


def shard_train_on_rank(unit_cls: Callable[..., Any], train_fn: Callable[..., list[float]],
                        model_fn: Callable[[], nn.Module], batches: Sequence[Batch], lr: float,
                        batches_per_call: int = 1, group: Any = None) -> dict[str, Any]:
    """Wrap every unit of ``model_fn()`` in ``unit_cls(m, group=group)``, train with ``train_fn`` on this rank's shards.

    ``train_fn`` gets ``batches_per_call`` consecutive batches per call (this rank's rows of
    each, ``group``'s ranks sharing every batch). Returns the initial and final full parameters
    (gathered once more after training with one all-gather per unit), the losses, the bytes of
    full parameters allocated right after wrapping and after every call (all must be 0:
    FULL_SHARD frees them).
    """
    model = model_fn()
    init = state_of(model)
    modules = list(model[::2])
    units = [unit_cls(m, group=group) for m in modules]
    after_init = sum(_held(units, modules))
    leftover: list[int] = []
    losses: list[float] = []
    for start in range(0, len(batches), batches_per_call):
        mine = [rank_shard(x, y, group) for x, y in batches[start:start + batches_per_call]]
        losses += train_fn(model, units, mine, lr)
        leftover.append(sum(_held(units, modules)))
    for u in units:
        u.gather()
    final = state_of(model)
    for u in units:
        u.free()
    return {"init": init, "final": final, "losses": losses, "after_init": after_init, "leftover_bytes": leftover,
            "shard_numel": [u.shard.numel() for u in units]}


# --------------------------------------------------------------------------- checks


def _gathers(ledger: Any, rank: int) -> int:
    return sum(ledger.count(op, rank) for op in _GATHERS)


def stored_expected(case: str) -> Any:
    """The float64 results a visible test compares with, stored with the course.

    ``"unit_gradients"``: the list of every unit's flat full-batch gradient; ``"trained_state"``:
    the parameters after full-batch SGD (a dict of tensors).
    """
    tensors = tensors_from_json(load(STORED_VISIBLE)[case])
    return [tensors[str(u)] for u in range(len(tensors))] if case == "unit_gradients" else tensors


def assert_unit_step(results: Sequence[dict[str, Any]], model_fn: Callable[[], nn.Module], batch: Batch,
                     ledger: Any, unit_gradients: Sequence[torch.Tensor]) -> None:
    """One step through the units (:func:`unit_step_on_rank`) agrees with the unsharded model.

    The ranks' outputs equal the unsharded model's on their rows; the ranks' ``shard.grad``,
    concatenated in rank order, are the zero-padded ``unit_gradients[u]`` (the flat full-batch
    mean gradient of unit ``u``); only the computing unit is materialised during forward, none
    after forward or after the step; every unit all-gathered twice and reduce-scattered once.
    """
    model = model_fn()
    world = len(results)
    rows = len(batch[0]) // world
    for rank, r in enumerate(results):
        if any(r["after_init"]):
            raise AssertionError(f"rank {rank}: right after wrapping, the units hold {r['after_init']} bytes of full "
                                 f"parameters: __init__ must end with free().")
        with torch.no_grad():
            expected_out = model(batch[0][rank * rows:(rank + 1) * rows])
        if not torch.allclose(r["output"], expected_out, atol=1e-5, rtol=1e-4):
            raise AssertionError(f"rank {rank}: the sharded model's output differs from the unsharded model's: does "
                                 f"gather() fill self.full, and is every parameter a view into it?")
        for u, held in enumerate(r["during_forward"]):
            if held[u] == 0 or any(h for v, h in enumerate(held) if v != u):
                raise AssertionError(f"rank {rank}: while unit {u}'s forward ran, the units held {held} bytes of "
                                     f"full parameters; FULL_SHARD materialises only the unit that computes.")
        if any(r["after_forward"]) or any(r["after_step"]):
            raise AssertionError(f"rank {rank}: full-parameter bytes after forward {r['after_forward']}, after "
                                 f"reduce_gradients() and free() {r['after_step']}; both must be 0.")
        if not r["grads_cleared"]:
            raise AssertionError(f"rank {rank}: the module parameters still have .grad after reduce_gradients(): "
                                 f"set them to None, the shard holds the gradient now.")
    for u, expected in enumerate(unit_gradients):
        expected = expected.double()
        size = -(-expected.numel() // world)
        shards = [r["grad_shards"][u] for r in results]
        if any(s is None or s.numel() != size for s in shards):
            raise AssertionError(f"unit {u}: shard.grad has {[None if s is None else s.numel() for s in shards]} "
                                 f"elements on ranks 0..{world - 1}; expected S = ceil({expected.numel()}/{world}) = "
                                 f"{size} on every rank.")
        got = torch.cat(shards).double()
        if not torch.allclose(got[: expected.numel()], expected, atol=1e-5, rtol=1e-4):
            ratio = float(got[: expected.numel()] @ expected) / max(float(expected @ expected), 1e-30)
            hint = f" They are {ratio:.2f} x the mean: divide the reduce-scattered sum by N." if abs(
                ratio - world) < 0.01 else ""
            raise AssertionError(f"unit {u}: the ranks' shard.grad, concatenated in rank order, are not the flat "
                                 f"full-batch mean gradient of the unit.{hint}")
        if got.numel() > expected.numel() and float(got[expected.numel():].abs().max()) > 0:
            raise AssertionError(f"unit {u}: the padding of the last shard has a non-zero gradient.")
    units = len(model[::2])
    for rank in range(ledger.world_size):
        gathers, scatters = _gathers(ledger, rank), sum(ledger.count(op, rank) for op in _SCATTERS)
        if (gathers, scatters) != (2 * units, units):
            raise AssertionError(f"rank {rank}: {gathers} all-gathers and {scatters} reduce-scatters in one step of "
                                 f"{units} units; FULL_SHARD gathers each unit twice (forward, then again for "
                                 f"backward) and reduce-scatters it once: {2 * units} and {units}.")


def assert_sharded_training(results: Sequence[dict[str, Any]], expected: dict[str, torch.Tensor], steps: int,
                            ledger: Any, units: int) -> None:
    """Training through the units ends at ``expected`` (full-batch SGD), frees, and gathers twice per unit per step.

    ``results`` come from :func:`shard_train_on_rank` after ``steps`` steps of ``units`` units;
    ``ledger=None`` skips counting the all-gathers.
    """
    for rank, r in enumerate(results):
        if r["after_init"]:
            raise AssertionError(f"rank {rank}: right after wrapping, the units hold {r['after_init']} bytes of full "
                                 f"parameters: __init__ must end with free().")
        if len(r["losses"]) != steps or not all(type(loss) is float for loss in r["losses"]):
            raise AssertionError(f"rank {rank}: {steps} batches gave the losses {r['losses']!r:.120}; expected one "
                                 f"Python float per batch, every batch of every call.")
        if any(r["leftover_bytes"]):
            raise AssertionError(f"rank {rank}: after a step, {max(r['leftover_bytes'])} bytes of full parameters "
                                 f"were still allocated: free every unit after its reduce-scatter.")
        diff = first_difference(r["final"], expected, atol=1e-5, rtol=1e-4)
        if diff is not None:
            unchanged = first_difference(r["final"], r["init"], atol=0.0, rtol=0.0) is None
            hint = (" The parameters never changed: is the optimizer stepping the shards (unit.shard), which the "
                    "next all-gather reads?" if unchanged else "")
            raise AssertionError(f"rank {rank}: after {steps} steps the parameters differ from single-process "
                                 f"SGD on the full batch ({diff}).{hint}")
    for rank in range(0 if ledger is None else ledger.world_size):
        gathers = _gathers(ledger, rank)
        expected_gathers = 2 * units * steps + units  # + one final gather to read the parameters
        if gathers != expected_gathers:
            raise AssertionError(f"rank {rank}: {gathers} all-gathers in {steps} steps of {units} units (plus "
                                 f"{units} to read the result); FULL_SHARD needs 2 per unit per step, "
                                 f"{expected_gathers} in all.")
