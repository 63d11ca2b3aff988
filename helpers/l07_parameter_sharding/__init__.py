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

import weakref
from typing import Any, Callable, Sequence

import torch
from torch import nn

from helpers.shared.checks import first_difference
from helpers.shared.data import tensors_from_json
from helpers.shared.state import mse, rank_shard, state_of
from helpers.shared.stored import load

Batch = tuple[torch.Tensor, torch.Tensor]
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


def unit_bounds(model: nn.Module, world_size: int) -> list[int]:
    """Per unit (``model[::2]``): the most bytes of full parameters it may hold, ``4 * N * ceil(n / N)``."""
    return [4 * world_size * -(-sum(p.numel() for p in m.parameters()) // world_size) for m in model[::2]]


def step_bytes_bound(model: nn.Module, world_size: int) -> float:
    """Ring bytes one rank may send per step: per unit, two all-gathers and one reduce-scatter of ``N * S`` floats."""
    return 3 * (world_size - 1) / world_size * sum(unit_bounds(model, world_size))


def _unit_tensors(unit: Any) -> list[torch.Tensor]:
    """The tensors a unit keeps in its attributes, directly or inside a list, tuple or dict attribute."""
    found: list[torch.Tensor] = []
    for value in vars(unit).values():
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        found += [t for t in items if isinstance(t, torch.Tensor)]
    return found


def _held(units: Sequence[Any], modules: Sequence[nn.Module],
          saved: Sequence[Sequence[torch.Tensor]] | None = None) -> list[int]:
    """Bytes of full parameters each unit keeps allocated, read from the storages, not from an attribute.

    Per unit: the bytes (``untyped_storage().nbytes()``) of the distinct storages behind its
    module's parameters, behind every tensor the unit keeps in an attribute and behind ``saved[u]``
    (the tensors autograd saved for backward while the unit's forward ran, activations excluded),
    except the storages of ``shard`` and ``shard.grad``. A ``free()`` that only rebinds an
    attribute leaves the parameters viewing the old buffer, and its bytes are counted here.
    """
    held = []
    for u, (unit, module) in enumerate(zip(units, modules)):
        shard = getattr(unit, "shard", None)
        own = {t.untyped_storage().data_ptr() for t in (shard, getattr(shard, "grad", None))
               if isinstance(t, torch.Tensor)}
        tensors = [*module.parameters(), *_unit_tensors(unit), *(saved[u] if saved else [])]
        storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
        held.append(sum(n for ptr, n in storages.items() if ptr not in own))
    return held


class _ProbeGrad(torch.autograd.Function):
    """Identity whose backward tells a :class:`Probe` that backward reached it."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, probe: "Probe") -> torch.Tensor:
        ctx.probe = probe
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        ctx.probe.on_backward()
        return grad, None


class Probe(nn.Module):
    """The last layer of a probed unit: calls ``on_forward()`` while the unit computes its forward (its other
    layers have run, the unit's own forward hooks have not), ``on_backward()`` when backward reaches the unit."""

    def __init__(self, on_forward: Callable[[], None], on_backward: Callable[[], None]) -> None:
        super().__init__()
        self.on_forward, self.on_backward = on_forward, on_backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.on_forward()
        return _ProbeGrad.apply(x, self) if x.requires_grad else x


class _Meter:
    """Puts a :class:`Probe` at the end of every unit of ``model`` and records the bytes every unit holds.

    Tensors autograd saves while a unit's forward runs count for that unit, except activations
    (the inputs and outputs of the model's modules).
    """

    def __init__(self, model: nn.Module) -> None:
        self.units: list[Any] = []
        self.phase, self.inside = "forward", None
        self.record: dict[str, Any] = {"during_forward": [], "during_backward": []}
        # storage address -> the activation, kept alive so that no later buffer reuses its address
        self.activations: dict[int, torch.Tensor] = {}
        self.saved: list[list[Any]] = []
        for i in range(0, len(model), 2):
            u = i // 2
            model[i] = nn.Sequential(model[i], Probe(lambda u=u: self.probe("during_forward", u),
                                                     lambda u=u: self.probe("during_backward", u)))
            model[i].register_forward_pre_hook(lambda m, args, u=u: self.enter(u))  # until the next unit enters
            self.saved.append([])
        for m in model.modules():
            m.register_forward_pre_hook(lambda m, args: self.note_activations(args))
            m.register_forward_hook(lambda m, args, out: self.note_activations((out,)))
        self.modules = list(model[::2])

    def enter(self, unit: int) -> None:
        self.inside = unit

    def note_activations(self, tensors: Sequence[Any]) -> None:
        self.activations.update((t.untyped_storage().data_ptr(), t) for t in tensors if isinstance(t, torch.Tensor))

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        """Save what autograd saves without hooks, a tensor sharing ``t``'s storage of the moment, and note it."""
        saved = t.detach()
        if self.inside is not None:
            self.saved[self.inside].append(weakref.ref(saved))
        return saved

    def held(self) -> list[int]:
        """Bytes each unit holds now (see :func:`_held`)."""
        saved = [[t for t in (ref() for ref in refs) if t is not None
                  and t.untyped_storage().data_ptr() not in self.activations] for refs in self.saved]
        return _held(self.units, self.modules, saved)

    def probe(self, when: str, unit: int) -> None:
        if when == "during_forward" and self.phase != "forward":
            return  # a recomputation during backward
        self.record[when].append([unit, self.held()])


def unit_step_on_rank(unit_cls: Callable[..., Any], model_fn: Callable[[], nn.Module], batch: Batch) -> dict[str, Any]:
    """Wrap every unit of ``model_fn()`` (ending in a :class:`Probe`) in ``unit_cls``; one forward, backward and
    ``reduce_gradients``.

    Runs on this rank's rows of ``batch``. Returns the shard sizes, the bytes of full parameters
    each unit held after wrapping, while each unit's forward ran, when backward reached each unit
    (``[unit, bytes per unit]``), after forward, after backward and after every unit's
    ``reduce_gradients()`` and ``free()``; the output, every unit's ``shard.grad`` and whether the
    module gradients were cleared.
    """
    model = model_fn()
    meter = _Meter(model)
    meter.units = [unit_cls(m) for m in meter.modules]
    record = meter.record
    record.update(shard_numel=[u.shard.numel() for u in meter.units], after_init=meter.held())
    x, y = rank_shard(*batch)
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, lambda t: t):
        out = model(x)
    record["after_forward"] = meter.held()
    meter.phase = "backward"
    mse(out, y).backward()
    record["after_backward"] = meter.held()
    for u in meter.units:
        u.reduce_gradients()
        u.free()
    record["after_step"] = meter.held()
    record["output"] = out.detach().clone()
    record["grad_shards"] = [None if u.shard.grad is None else u.shard.grad.detach().clone() for u in meter.units]
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


def stored_expected(case: str) -> Any:
    """The float64 results a visible test compares with, stored with the course.

    ``"unit_gradients"``: the list of every unit's flat full-batch gradient; ``"trained_state"``:
    the parameters after full-batch SGD (a dict of tensors).
    """
    tensors = tensors_from_json(load(STORED_VISIBLE)[case])
    return [tensors[str(u)] for u in range(len(tensors))] if case == "unit_gradients" else tensors


def _memory_problem(r: dict[str, Any], bounds: Sequence[int]) -> str | None:
    """What one rank's recorded bytes (:func:`unit_step_on_rank`) say the units held too much of, or ``None``."""
    checks = [("after_init", "right after wrapping"), ("during_forward", "forward"),
              ("after_forward", "after the model's forward"), ("during_backward", "backward"),
              ("after_step", "after every unit's reduce_gradients() and free()")]
    for when, what in checks:
        if when.startswith("after") and any(r[when]):
            return (f"{what}, the units held {r[when]} bytes besides their shards (in their modules' parameters, "
                    f"their attributes or what autograd saved); FULL_SHARD keeps only the shards between "
                    f"operations: 0 bytes.")
        for unit, held in r[when] if when.startswith("during") else []:
            over = [v for v, h in enumerate(held) if h > bounds[v]]
            others = [v for v, h in enumerate(held) if h and v != unit] if when == "during_forward" else []
            if over or others:
                return (f"while unit {unit}'s {what} ran, the units held {held} bytes besides their shards; each unit "
                        f"may hold at most its padded parameters, 4 N S bytes ({list(bounds)}), and during forward "
                        f"only the unit that computes holds any.")
    return None


def assert_unit_step(results: Sequence[dict[str, Any]], model_fn: Callable[[], nn.Module], batch: Batch,
                     ledger: Any, unit_gradients: Sequence[torch.Tensor]) -> None:
    """One step through the units (:func:`unit_step_on_rank`) agrees with the unsharded model.

    The ranks' outputs equal the unsharded model's on their rows; the ranks' ``shard.grad``,
    concatenated in rank order, are the zero-padded ``unit_gradients[u]`` (the flat full-batch
    mean gradient of unit ``u``); the bytes the units held stay within the bounds (see
    :func:`_memory_problem`); every rank sent at most :func:`step_bytes_bound` ring bytes.
    """
    model = model_fn()
    world = len(results)
    rows = len(batch[0]) // world
    bounds = unit_bounds(model, world)
    for rank, r in enumerate(results):
        with torch.no_grad():
            expected_out = model(batch[0][rank * rows:(rank + 1) * rows])
        if not torch.allclose(r["output"], expected_out, atol=1e-5, rtol=1e-4):
            raise AssertionError(f"rank {rank}: the sharded model's output differs from the unsharded model's: does "
                                 f"the forward compute with the full parameters assembled from every rank's shard?")
        problem = _memory_problem(r, bounds)
        if problem is not None:
            raise AssertionError(f"rank {rank}: {problem}")
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
    _assert_traffic(ledger, step_bytes_bound(model, world), "one step")


def _assert_traffic(ledger: Any, bound: float, what: str) -> None:
    """Every rank sent at most ``bound`` ring bytes (the ledger's measure)."""
    for rank in range(ledger.world_size):
        sent = ledger.bytes(rank)
        if sent > bound * (1 + 1e-9):
            ops = sorted({r.op for r in ledger.records[rank]})
            raise AssertionError(f"rank {rank} sent {sent:,.0f} ring bytes ({', '.join(ops)}) in {what}; FULL_SHARD "
                                 f"needs at most {bound:,.0f}: per unit and step two all-gathers of its N S floats "
                                 f"and one reduce-scatter of its gradient, 3 (N-1) S 4 bytes.")


def assert_sharded_training(results: Sequence[dict[str, Any]], expected: dict[str, torch.Tensor], steps: int,
                            ledger: Any) -> None:
    """Training through the units ends at ``expected`` (full-batch SGD), frees, and sends at most FULL_SHARD's bytes.

    ``results`` come from :func:`shard_train_on_rank` after ``steps`` steps; ``ledger=None``
    skips the traffic bound (per unit and step, two all-gathers and one reduce-scatter of its
    ``N * S`` floats, plus one all-gather per unit to read the result).
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
    if ledger is not None:
        world = ledger.world_size
        numels: dict[str, int] = {}
        for name, t in results[0]["init"].items():   # parameter elements per unit, the first name part
            numels[name.split(".")[0]] = numels.get(name.split(".")[0], 0) + t.numel()
        padded = sum(4 * world * -(-n // world) for n in numels.values())
        bound = (3 * steps + 1) * (world - 1) / world * padded
        _assert_traffic(ledger, bound, f"{steps} steps (and one all-gather per unit to read the result)")
