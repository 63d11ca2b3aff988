"""Lesson 07, parameter sharding (FULL_SHARD): references, a real FSDP2 probe, drivers and checks.

A **unit** is a module whose parameters are stored flat and sharded: the flat vector of its
``numel`` parameter elements is padded to ``N * S`` (``S = ceil(numel / N)``) and rank ``r``
keeps elements ``[r*S, (r+1)*S)``, the layout of lesson 06. A unit materialises its full
parameters only around the operations that need them: an all-gather before its forward, a
free after it, a second all-gather before its backward (FULL_SHARD), a reduce-scatter of its
gradient and a free after backward.

This flat layout is FSDP1's and the exercise's; FSDP2 (``fully_shard``) instead shards
every parameter along dimension 0 as a DTensor, with the same traffic and the same schedule.
Sizes are elements unless a name says bytes; traffic is the bytes one rank sends under ring
algorithms (:mod:`helpers.costs`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.checks import first_difference
from helpers.costs import ring_allgather_bytes, ring_reduce_scatter_bytes
from helpers.reference import mse, rank_shard, state_of

Event = tuple[str, int]


# --------------------------------------------------------------------------- references


def full_shard_schedule(num_units: int, reshard_after_forward: bool = True) -> list[Event]:
    """Communication and memory events of one training step, without prefetching.

    Forward visits units ``0..U-1``: ``all_gather``, then ``free`` if
    ``reshard_after_forward`` (FULL_SHARD; otherwise SHARD_GRAD_OP keeps them). Backward
    visits ``U-1..0``: ``all_gather`` again if the unit was freed, ``reduce_scatter`` of its
    gradient, ``free``.
    """
    events: list[Event] = []
    for u in range(num_units):
        events.append(("all_gather", u))
        if reshard_after_forward:
            events.append(("free", u))
    for u in reversed(range(num_units)):
        if reshard_after_forward:
            events.append(("all_gather", u))
        events += [("reduce_scatter", u), ("free", u)]
    return events


def fsdp_traffic_bytes(num_params: int, bytes_per_param: int, world_size: int,
                       reshard_after_forward: bool = True) -> float:
    """Ring bytes one rank sends per step: all-gathers (2 or 1 per unit) plus one reduce-scatter.

    FULL_SHARD: ``3 (N-1)/N * Psi * b``; SHARD_GRAD_OP: ``2 (N-1)/N * Psi * b``, the same
    as DDP's all-reduce.
    """
    gathers = 2 if reshard_after_forward else 1
    return (gathers * ring_allgather_bytes(num_params, bytes_per_param, world_size)
            + ring_reduce_scatter_bytes(num_params, bytes_per_param, world_size))


def unit_parameters(model: nn.Module, unit_names: Sequence[str]) -> dict[str, list[str]]:
    """The parameter names each unit shards; ``""`` (the root) takes the rest and every shared one.

    A parameter belongs to a unit when all of its names (a tied parameter has several, see
    ``named_parameters(remove_duplicate=False)``) lie inside that unit's module. A
    parameter reached from two units, or from a unit and outside it, goes to the root, their
    common ancestor, as FSDP requires. Each parameter appears once, under its first name.
    """
    def unit_of(name: str) -> str:
        return next((u for u in unit_names if name.startswith(u + ".")), "")

    names_of: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names_of.setdefault(id(p), []).append(name)
    out: dict[str, list[str]] = {u: [] for u in [*unit_names, ""]}
    for name, p in model.named_parameters():
        units = {unit_of(n) for n in names_of[id(p)]}
        out[units.pop() if len(units) == 1 else ""].append(name)
    return out


class ReferenceShardedUnit:
    """A minimal fully-sharded unit (the exercise's contract); see the module docstring."""

    def __init__(self, module: nn.Module, group: Any = None) -> None:
        self.module, self.group = module, group
        self.params = list(module.parameters())
        world, rank = dist.get_world_size(group), dist.get_rank(group)
        self.numel = sum(p.numel() for p in self.params)
        self.shard_size = -(-self.numel // world)
        flat = torch.zeros(world * self.shard_size)
        flat[: self.numel] = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.shard = nn.Parameter(flat[rank * self.shard_size: (rank + 1) * self.shard_size].clone())
        self.full = flat
        offset = 0
        for p in self.params:
            p.data = self.full[offset: offset + p.numel()].view_as(p)
            offset += p.numel()
        module.register_forward_pre_hook(lambda m, args: self.gather())
        module.register_forward_hook(self._after_forward)
        self.free()

    def _after_forward(self, module: nn.Module, args: Any, out: torch.Tensor) -> None:
        self.free()
        if out.requires_grad:  # fires when backward reaches this unit's output: re-gather first
            out.register_hook(lambda grad: self.gather())

    def gather(self) -> None:
        storage = self.full.untyped_storage()
        if storage.nbytes() == 0:
            storage.resize_(self.full.numel() * self.full.element_size())
        dist.all_gather_single(self.full, self.shard.detach(), group=self.group)

    def free(self) -> None:
        self.full.untyped_storage().resize_(0)

    def reduce_gradients(self) -> None:
        world = dist.get_world_size(self.group)
        flat = torch.zeros(world * self.shard_size)
        flat[: self.numel] = torch.cat([p.grad.reshape(-1) for p in self.params])
        out = torch.empty(self.shard_size)
        dist.reduce_scatter_single(out, flat, group=self.group)
        self.shard.grad = out / world
        for p in self.params:
            p.grad = None


def reference_train(model: nn.Module, units: Sequence[Any], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                    lr: float) -> list[float]:
    """The exercise's training loop: SGD over the shards, one FULL_SHARD step per batch."""
    opt = torch.optim.SGD([u.shard for u in units], lr=lr)
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = mse(model(x), y)
        loss.backward()
        for u in units:
            u.reduce_gradients()
            u.free()
        opt.step()
        losses.append(loss.item())
    return losses


# --------------------------------------------------------------------------- models and drivers


def layered_mlp(widths: Sequence[int] = (6, 10, 7, 3)) -> nn.Sequential:
    """Linear layers with ReLUs between them; the Linear layers (even indices) are the units."""
    layers: list[nn.Module] = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def units_of(model: nn.Sequential) -> list[nn.Module]:
    """The submodules of ``model`` that hold parameters (the Linear layers of :func:`layered_mlp`)."""
    return [m for m in model if any(True for _ in m.parameters())]


def fsdp2_counts_on_rank(widths: Sequence[int], reshard_after_forward: bool) -> dict[str, Any]:
    """One step of real FSDP2 (``fully_shard`` on every Linear, then the root); return this rank's state."""
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = layered_mlp(widths)
    for unit in units_of(model):
        fully_shard(unit, reshard_after_forward=reshard_after_forward)
    fully_shard(model, reshard_after_forward=reshard_after_forward)
    x, y = torch.randn(4, widths[0]), torch.randn(4, widths[-1])
    mse(model(x), y).backward()
    return {"units": len(units_of(model))}


def shard_train_on_rank(unit_cls: Callable[..., Any], train_fn: Callable[..., list[float]],
                        model_fn: Callable[[], nn.Module], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                        lr: float) -> dict[str, Any]:
    """Wrap every unit of ``model_fn()`` in ``unit_cls``, train with ``train_fn`` on this rank's shards.

    Returns the initial and final full parameters (gathered once more after training with
    one all-gather per unit), the losses, and how many bytes of full parameters were still
    allocated after every step (must be 0: FULL_SHARD frees them).
    """
    model = model_fn()
    init = state_of(model)
    units = [unit_cls(m) for m in units_of(model)]
    leftover: list[int] = []

    def track(*_: Any) -> None:
        leftover.append(sum(p.untyped_storage().nbytes() for p in model.parameters()))

    local = [rank_shard(x, y) for x, y in batches]
    losses = []
    for batch in local:
        losses += train_fn(model, units, [batch], lr)
        track()
    for u in units:
        u.gather()
    final = state_of(model)
    for u in units:
        u.free()
    shard_numel = [u.shard.numel() for u in units]
    return {"init": init, "final": final, "losses": losses, "leftover_bytes": leftover, "shard_numel": shard_numel}


def sgd_full_batch(model_fn: Callable[[], nn.Module], batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                   lr: float) -> dict[str, torch.Tensor]:
    """float64 single-process SGD on the full batches: what sharded training must reproduce."""
    model = model_fn().double()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        mse(model(x.double()), y.double()).backward()
        opt.step()
    return state_of(model)


# --------------------------------------------------------------------------- checks


def assert_schedule(fn: Callable[..., list[Event]], cases: Sequence[tuple[int, bool]]) -> None:
    """``fn(num_units, reshard_after_forward)`` equals :func:`full_shard_schedule`."""
    for units, reshard in cases:
        exp = full_shard_schedule(units, reshard)
        got = fn(units, reshard)
        got = [tuple(e) for e in got] if isinstance(got, (list, tuple)) else got
        if got != exp:
            hint = ""
            if isinstance(got, list):
                gathers, exp_gathers = sum(e[0] == "all_gather" for e in got), sum(e[0] == "all_gather" for e in exp)
                if gathers != exp_gathers:
                    hint = (f" It all-gathers {gathers} times; a step needs {exp_gathers} "
                            f"({'twice' if reshard else 'once'} per unit).")
                elif sum(e[0] == "free" for e in got) != sum(e[0] == "free" for e in exp):
                    hint = " Some gathered parameters are never freed, or freed twice."
            raise AssertionError(f"full_shard_schedule({units}, reshard_after_forward={reshard}) returned "
                                 f"{got!r:.200}, expected {exp!r:.200}.{hint}")


def assert_matches_fsdp2(fn: Callable[..., list[Event]], counts: dict[str, Any], ledger: Any, reshard: bool) -> None:
    """The schedule's collective counts per step equal what real FSDP2 issued (from the ledger)."""
    units = counts["units"]
    events = fn(units, reshard)
    for op, ledger_ops in (("all_gather", ("all_gather_single", "all_gather_into_tensor")),
                           ("reduce_scatter", ("reduce_scatter_single", "reduce_scatter_tensor"))):
        mine = sum(1 for e in events if e[0] == op)
        real = sum(ledger.count(name) for name in ledger_ops)
        if mine != real:
            raise AssertionError(f"{units} units, reshard_after_forward={reshard}: your schedule has {mine} {op}s "
                                 f"per step; real FSDP2 (fully_shard) issued {real}.")


def assert_traffic(fn: Callable[..., float], cases: Sequence[tuple[int, int, int, bool]]) -> None:
    """``fn`` equals :func:`fsdp_traffic_bytes` on every case."""
    for num_params, b, n, reshard in cases:
        exp, got = fsdp_traffic_bytes(num_params, b, n, reshard), fn(num_params, b, n, reshard)
        if not isinstance(got, (int, float)) or abs(got - exp) > 1e-9 * max(1.0, exp):
            raise AssertionError(f"fsdp_traffic_bytes({num_params}, {b}, {n}, reshard_after_forward={reshard}) "
                                 f"returned {got!r}, expected {exp:,.1f} bytes.")


def assert_traffic_measured(fn: Callable[..., float], ledger: Any, num_params: int, reshard: bool) -> None:
    """``fn`` predicts the ring bytes real FSDP2 issued (sizes divisible by N: no padding)."""
    n = ledger.world_size
    measured = ledger.bytes(0)
    predicted = fn(num_params, 4, n, reshard)
    if abs(predicted - measured) > 1e-6 * measured:
        raise AssertionError(f"real FSDP2 with {num_params} float32 parameters on {n} ranks "
                             f"(reshard_after_forward={reshard}) sent {measured:,.0f} ring bytes per rank in one "
                             f"step; fsdp_traffic_bytes predicts {predicted:,.0f}.")


def assert_unit_parameters(fn: Callable[..., dict[str, list[str]]], model: nn.Module, unit_names: Sequence[str]) -> None:
    """``fn`` assigns every parameter exactly once, and shared ones to the root."""
    exp = unit_parameters(model, unit_names)
    got = fn(model, list(unit_names))
    if not isinstance(got, dict) or {k: list(v) for k, v in got.items()} != exp:
        hint = ""
        if isinstance(got, dict):
            flat = [n for v in got.values() for n in v]
            if len(flat) != len(set(flat)) or len(flat) > sum(len(v) for v in exp.values()):
                hint = (" A parameter appears in two units: a tied weight would be sharded (and updated) twice, "
                        "once per copy.")
            elif set(exp[""]) - set(got.get("", [])):
                hint = (" A parameter shared by two units must go to their common ancestor, the root \"\": split "
                        "across units its copies desynchronise.")
        raise AssertionError(f"unit_parameters(model, {list(unit_names)}) returned {got!r:.300}, expected "
                             f"{exp!r:.300}.{hint}")


def assert_sharded_training(results: Sequence[dict[str, Any]], model_fn: Callable[[], nn.Module],
                            batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, ledger: Any,
                            units: int) -> None:
    """Training through the units equals full-batch SGD; parameters freed; 2 all-gathers per unit per step."""
    expected = sgd_full_batch(model_fn, batches, lr)
    for rank, r in enumerate(results):
        if any(r["leftover_bytes"]):
            raise AssertionError(f"rank {rank}: after a step, {max(r['leftover_bytes'])} bytes of full parameters "
                                 f"were still allocated: free every unit after its reduce-scatter.")
        diff = first_difference(r["final"], expected, atol=1e-5, rtol=1e-4)
        if diff is not None:
            unchanged = first_difference(r["final"], r["init"], atol=0.0, rtol=0.0) is None
            hint = (" The parameters never changed: is the optimizer stepping the shards (unit.shard), which the "
                    "next all-gather reads?" if unchanged else "")
            raise AssertionError(f"rank {rank}: after {len(batches)} steps the parameters differ from single-process "
                                 f"SGD on the full batch ({diff}).{hint}")
    steps = len(batches)
    for rank in range(ledger.world_size):
        gathers = sum(ledger.count(op, rank) for op in ("all_gather_single", "all_gather_into_tensor"))
        expected_gathers = 2 * units * steps + units  # + one final gather to read the parameters
        if gathers != expected_gathers:
            raise AssertionError(f"rank {rank}: {gathers} all-gathers in {steps} steps of {units} units (plus "
                                 f"{units} to read the result); FULL_SHARD needs 2 per unit per step, "
                                 f"{expected_gathers} in all.")
