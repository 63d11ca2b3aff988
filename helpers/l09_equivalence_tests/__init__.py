"""Lesson 09, equivalence tests: the shared problem, a float64 reference run and a zoo of real runs.

Every run trains :class:`helpers.shared.models.TinyMLP` for a few Adam steps with global-norm
clipping, resuming from the same "checkpoint" (parameters and an Adam state at step 1000),
so that bugs in the step counter or the second moment barely move the parameters. The
reference is one process, full batch, float64, small learning rate; the zoo runs on a gloo
group of 2 ranks.

Right after each optimizer step a run calls ``capture(model, optimizer, loss, clip_coef,
mask)`` and keeps what it returns, one value per step. ``loss`` is the step's global
(all-rank) loss, ``clip_coef`` the clipping coefficient applied (0-dim tensors), ``mask`` the
bool mask of the rows that counted (whole global batch), and ``optimizer`` a
``torch.optim.Adam`` holding the whole (for ZeRO-1: consolidated) state. The default
capture, :func:`snapshot`, keeps PyTorch's own view of the step in the run's dtype; pass a
``capture_update_state`` to get update states instead (:func:`capture_tiny_step` runs one on a
single step, for exercise 1's test). Nothing here compares runs: the chapter compares
snapshots with ``torch.testing.assert_close`` and shows the course checker's verdicts from
results stored with the course (:mod:`helpers.shared.stored`). The key names of an update state
(``loss``, ``grad/<name>``, ...) are ordered and grouped by family with :func:`ordered_keys`
and :func:`key_family`.
"""
from __future__ import annotations

import copy
from collections.abc import Collection
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.shared.models import TinyMLP

Capture = Callable[[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor, torch.Tensor], Any]
LR, BETAS, EPS, MAX_NORM, RESUME_STEP = 1e-5, (0.9, 0.999), 1e-8, 0.5, 1000
IN_FEATURES, HIDDEN, OUT_FEATURES, ROWS = 8, 16, 4, 16  # ROWS per global batch, split over the ranks


# --------------------------------------------------------------------------- names of update-state keys

FAMILIES = ("loss", "clip_coef", "mask", "grad", "param", "exp_avg", "exp_avg_sq", "step")
"""Key families of an update state, in the order the figures show them."""

_DTYPE_NAMES = {torch.float64: "float64", torch.float32: "float32", torch.bfloat16: "bfloat16",
                torch.float16: "float16"}
_SHORT = {"float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def key_family(key: str) -> str:
    """``'grad/fc1.weight' -> 'grad'``; keys without a slash are their own family."""
    return key.split("/", 1)[0]


def ordered_keys(keys: Collection[str]) -> list[str]:
    """Keys grouped by family in :data:`FAMILIES` order (unknown families last), then by name."""
    rank = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(keys, key=lambda k: (rank.get(key_family(k), len(FAMILIES)), k))


def dtype_name(dtype: torch.dtype | str, short: bool = False) -> str:
    """``torch.bfloat16`` or ``'bfloat16'`` -> ``'bfloat16'`` (``'bf16'`` when ``short``)."""
    name = dtype if isinstance(dtype, str) else _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))
    return _SHORT.get(name, name) if short else name


# --------------------------------------------------------------------------- the shared setup


@dataclass(frozen=True)
class Problem:
    """Everything a run needs: initial parameters, resumed Adam state, batches and masks."""

    init: dict[str, torch.Tensor]
    exp_avg: dict[str, torch.Tensor]
    exp_avg_sq: dict[str, torch.Tensor]
    batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (x, y, mask of valid rows)


def make_problem(seed: int = 0, steps: int = 3) -> Problem:
    """A deterministic problem; the mask drops the last ``step % 7 + 1`` rows of each rank's half (never all)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyMLP(IN_FEATURES, HIDDEN, OUT_FEATURES)
    # Biases start away from zero: a parameter's scale is then its values, not its tiny updates.
    init = {n: p.detach().clone() + (0.1 * torch.randn(p.shape, generator=g) if p.dim() == 1 else 0)
            for n, p in model.named_parameters()}
    exp_avg = {n: 0.01 * torch.randn(p.shape, generator=g) for n, p in init.items()}
    exp_avg_sq = {n: (0.05 * torch.randn(p.shape, generator=g)) ** 2 + 1e-4 for n, p in init.items()}
    batches = []
    for step in range(steps):
        x = torch.randn(ROWS, IN_FEATURES, generator=g)
        y = torch.randn(ROWS, OUT_FEATURES, generator=g)
        mask = torch.ones(ROWS, dtype=torch.bool)
        half, dropped = ROWS // 2, step % 7 + 1
        mask[half - dropped: half] = False
        mask[ROWS - dropped:] = False
        batches.append((x, y, mask))
    return Problem(init, exp_avg, exp_avg_sq, batches)


def build_model(problem: Problem, dtype: torch.dtype) -> nn.Module:
    """TinyMLP in ``dtype`` holding the problem's initial parameters."""
    model = TinyMLP(IN_FEATURES, HIDDEN, OUT_FEATURES).to(dtype)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(problem.init[n])
    return model


def build_adam(model: nn.Module, problem: Problem, step: int = RESUME_STEP, lr: float = LR,
               stored_as: torch.dtype | None = None) -> torch.optim.Adam:
    """Adam over ``model`` resumed from the problem's checkpoint at ``step`` (0: a fresh Adam).

    ``stored_as``: the dtype the moments went through in the checkpoint (a bug when lower).
    """
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=BETAS, eps=EPS)
    if step:
        resume(optimizer, model, problem, step, stored_as)
    return optimizer


def resume(optimizer: torch.optim.Optimizer, model: nn.Module, problem: Problem, step: int = RESUME_STEP,
           stored_as: torch.dtype | None = None) -> None:
    """Load the checkpointed Adam state into ``optimizer`` (the parameters it manages)."""
    def restore(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return (t if stored_as is None else t.to(stored_as)).to(p.dtype).clone()

    managed = {id(q) for group in optimizer.param_groups for q in group["params"]}
    for n, p in model.named_parameters():
        if id(p) in managed:
            optimizer.state[p] = {"step": torch.tensor(float(step)), "exp_avg": restore(problem.exp_avg[n], p),
                                  "exp_avg_sq": restore(problem.exp_avg_sq[n], p)}


def masked_mse(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, denominator: float) -> torch.Tensor:
    """Sum of squared errors over the valid rows, divided by ``denominator`` (elements)."""
    return ((out - y) ** 2)[mask].sum() / denominator


def clip(model: nn.Module, max_norm: float = MAX_NORM) -> torch.Tensor:
    """Clip the gradients to global 2-norm ``max_norm``; return the coefficient applied (float64, 0-dim)."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(torch.float64)


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, clip_coef: torch.Tensor,
             mask: torch.Tensor) -> dict[str, Any]:
    """PyTorch's own view of a step, deep-copied in the run's dtype (the default capture).

    ``{"loss", "clip_coef", "mask", "params": {name: parameter}, "grads": {name: gradient},
    "adam": {index: optimizer.state[p]}}``; ``adam`` is indexed like ``model.parameters()``
    (0, 1, ...) whatever the optimizer's parameter groups, each entry ``{"step", "exp_avg",
    "exp_avg_sq"}`` (for one group over ``model.parameters()``, ``optimizer.state_dict()["state"]``).
    Nested dicts of tensors, so ``torch.testing.assert_close`` compares two snapshots whole.
    """
    return copy.deepcopy({
        "loss": loss.detach(), "clip_coef": torch.as_tensor(clip_coef).detach(), "mask": mask,
        "params": {n: p.detach() for n, p in model.named_parameters()},
        "grads": {n: p.grad for n, p in model.named_parameters()},
        "adam": {i: optimizer.state[p] for i, p in enumerate(model.parameters()) if p in optimizer.state},
    })


def capture_tiny_step(capture: Capture, loss: torch.Tensor, clip_coef: torch.Tensor, mask: torch.Tensor
                      ) -> tuple[Any, dict[str, torch.Tensor], Any]:
    """One Adam step of a seeded ``nn.Linear(3, 2)`` captured by ``capture``, then a second step.

    Returns ``(captured, live, later)``: what ``capture(model, optimizer, loss, clip_coef, mask)``
    returned right after the first step (its tensors copied at once); PyTorch's own state read
    just before that call, in the model's dtype (``"weight"``, ``"bias.grad"``, and the weight's
    ``"exp_avg"`` and ``"exp_avg_sq"``); and the very value ``capture`` returned, once a second
    step has run and ``mask[0]`` has been set to ``False`` (in a copy of ``mask`` that ``capture``
    was given; the caller's ``mask`` is left as it was): a capture that kept live tensors (or the
    mask it was given) shows the change there. Plain data, and nothing is compared here, so it
    runs where the notebook's code lives: ``helpers.runtime.remote.call(capture_tiny_step, capture, ...)``.
    """
    mask = mask.clone()
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    adam = optimizer.state[model.weight]
    live = {"weight": model.weight.detach().clone(), "bias.grad": model.bias.grad.detach().clone(),
            "exp_avg": adam["exp_avg"].detach().clone(), "exp_avg_sq": adam["exp_avg_sq"].detach().clone()}
    captured = capture(model, optimizer, loss, clip_coef, mask)
    at_once = _copied(captured)
    model(torch.ones(4, 3)).sum().backward()   # gradients accumulate, the parameters and moments move
    optimizer.step()
    mask[0] = False
    return at_once, live, captured


def _copied(value: Any) -> Any:
    """``value`` with every tensor in it (in dicts, lists, tuples) detached and cloned."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_copied(v) for v in value)
    return value


# --------------------------------------------------------------------------- a sharded layout (design exercise 6)

FLAT = ("grad", "param", "exp_avg", "exp_avg_sq")
"""Families a ZeRO-1-style run keeps as one flat buffer split across its ranks."""
REPLICATED = ("loss", "clip_coef", "mask")
"""Keys every rank of a sharded run holds a copy of."""
Layout = list[tuple[str, list[int]]]


def shard_size(layout: Layout, world_size: int) -> int:
    """Elements of one rank's flat shard: ``ceil(P / world_size)`` for ``P`` elements in ``layout``."""
    total = sum(torch.Size(shape).numel() for _, shape in layout)
    return -(-total // world_size)


def shard_update_state(state: dict[str, torch.Tensor], layout: Layout, world_size: int,
                       padding: float = 0.0) -> list[dict[str, torch.Tensor]]:
    """A replicated update state as a ZeRO-1-style run on ``world_size`` ranks holds it, one dict per rank.

    For each family of :data:`FLAT`, the tensors of ``layout``'s parameters (in ``layout``'s
    order) are flattened row-major and concatenated, padded with ``padding`` up to
    ``world_size * shard_size(layout, world_size)`` elements and cut into equal consecutive
    slices, rank ``r`` holding slice ``r`` under the family's name. Every rank holds a copy of
    :data:`REPLICATED`, and ``"step"``: its own Adam counter, here the ``step/`` counter of the
    first parameter it holds an element of (of the first parameter when it holds only padding).
    """
    size = shard_size(layout, world_size)
    shards = [{key: state[key].clone() for key in REPLICATED} for _ in range(world_size)]
    for family in FLAT:
        flat = torch.cat([state[f"{family}/{name}"].flatten() for name, _ in layout])
        flat = torch.cat([flat, flat.new_full((world_size * size - flat.numel(),), padding)])
        for shard, piece in zip(shards, flat.split(size)):
            shard[family] = piece.clone()
    holders = holders_of(layout, world_size)
    for rank, shard in enumerate(shards):
        held = [name for name, _ in layout if rank in holders[name]] or [layout[0][0]]
        shard["step"] = state[f"step/{held[0]}"].clone()
    return shards


def holders_of(layout: Layout, world_size: int) -> dict[str, list[int]]:
    """``{name: the ranks whose flat shard holds an element of that parameter}`` (see :func:`shard_update_state`)."""
    size, start, holders = shard_size(layout, world_size), 0, {}
    for name, shape in layout:
        end = start + torch.Size(shape).numel()
        holders[name] = list(range(start // size, -(-end // size))) if end > start else []
        start = end
    return holders


# --------------------------------------------------------------------------- single-process runs


def single_process_run(problem: Problem | None = None, capture: Capture = snapshot, *,
                       dtype: torch.dtype = torch.float64, grad_scale: float = 1.0, clipped: bool = True,
                       resume_step: int = RESUME_STEP, lr: float = LR, autocast_bf16: bool = False) -> list[Any]:
    """One process, full batch, with knobs; one captured value per step.

    ``grad_scale`` multiplies every gradient after backward (``N`` = summing over ``N`` ranks
    instead of averaging); ``clipped=False`` skips global-norm clipping (``clip_coef`` 1);
    ``resume_step=0`` starts Adam fresh instead of from the checkpointed moments; ``dtype``
    is the dtype of the model and the data; ``autocast_bf16`` runs the forward under bfloat16
    autocast (weights, optimizer and loss stay in ``dtype``). The defaults are :func:`reference_run`.
    """
    problem = problem or make_problem()
    model = build_model(problem, dtype)
    optimizer = build_adam(model, problem, resume_step, lr)
    captured = []
    for x, y, mask in problem.batches:
        optimizer.zero_grad(set_to_none=True)
        with _autocast(torch.bfloat16 if autocast_bf16 else dtype):
            out = model(x.to(dtype))
        loss = masked_mse(out.to(dtype), y.to(dtype), mask, mask.sum().item() * OUT_FEATURES)
        loss.backward()
        for p in model.parameters():
            p.grad.mul_(grad_scale)
        coef = clip(model) if clipped else torch.tensor(1.0, dtype=torch.float64)
        optimizer.step()
        captured.append(capture(model, optimizer, loss, coef, mask))
    return captured


def reference_run(problem: Problem | None = None, capture: Capture = snapshot) -> list[Any]:
    """The canonical run: one process, the full batch, float64, small steps; one capture per step."""
    return single_process_run(problem, capture)


def calibration_run(problem: Problem | None = None, dtype: torch.dtype = torch.float32,
                    capture: Capture = snapshot) -> list[Any]:
    """A known-correct run at the precision ``dtype``: one process, full batch, float32 weights
    (under bfloat16 autocast when ``dtype`` is ``torch.bfloat16``); one capture per step.

    Its distance from :func:`reference_run` is what correct rounding at that precision costs.
    It runs in a fresh worker process of :mod:`helpers.runtime.cluster` (one rank), like the zoo: float32
    and bfloat16 kernels on small tensors can round differently in a process whose memory state
    earlier work has changed, and a calibration must not depend on what ran before it.
    """
    from helpers.runtime.cluster import run

    if dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"calibration runs exist for float32 and bfloat16, not {dtype}")
    problem = problem or make_problem()
    return run(lambda: single_process_run(problem, capture, dtype=torch.float32,
                                          autocast_bf16=dtype == torch.bfloat16), world_size=1, timeout=60)[0]


# --------------------------------------------------------------------------- the zoo (on gloo ranks)


@dataclass(frozen=True)
class Member:
    """One zoo run: the precision it computes in, its bug (``None``: correct) and the knobs that make it."""

    dtype: torch.dtype                   # float32, or bfloat16 = float32 weights under bfloat16 autocast
    bug: str | None = None
    zero1: bool = False                  # ZeroRedundancyOptimizer instead of a replicated Adam
    grad_scale_by_world: bool = False    # gradients summed over ranks
    resume_offset: int = 0               # Adam's step counter resumed this much too high
    moments_through: torch.dtype | None = None  # the checkpoint stored the moments in this dtype
    clip_before_average: bool = False    # each rank clips its own local gradient, then ranks average
    count_padding: bool = False          # padding rows counted as valid
    denominator_factor: float = 1.0      # the loss denominator multiplied by this


ZOO = {
    "ddp_fp32": Member(torch.float32),
    "zero1_fp32": Member(torch.float32, zero1=True),
    "ddp_bf16_autocast": Member(torch.bfloat16),
    "zero1_bf16_autocast": Member(torch.bfloat16, zero1=True),
    "grad_sum_not_mean": Member(torch.float32, "gradients summed over ranks, not averaged: clipping hides it "
                                               "everywhere but in the clip coefficient", grad_scale_by_world=True),
    "resume_step_off_by_one": Member(torch.float32, "Adam's step counter resumed one too high: only the step "
                                                    "differs", resume_offset=1),
    "moments_resumed_in_bf16": Member(torch.float32, "Adam's moments checkpointed in bfloat16: only the moments "
                                                     "differ", moments_through=torch.bfloat16),
    "clip_local_norm": Member(torch.float32, "each rank clips its own local gradient by its local norm, "
                                             "before the ranks average", clip_before_average=True),
    "mask_counts_padding": Member(torch.float32, "padding rows counted as valid", count_padding=True),
    "loss_denominator_one_percent_off": Member(torch.float32, "a loss denominator 1% too large",
                                               denominator_factor=1.01),
    "bf16_moments_resumed_in_bf16": Member(torch.bfloat16, "under bf16 autocast, Adam's moments checkpointed "
                                                           "in bfloat16", moments_through=torch.bfloat16),
    "bf16_clip_local_norm": Member(torch.bfloat16, "under bf16 autocast, each rank clips its own local "
                                                   "gradient before the ranks average", clip_before_average=True),
    "bf16_denominator_one_percent_off": Member(torch.bfloat16, "under bf16 autocast, a loss denominator 1% too "
                                                               "large", denominator_factor=1.01),
    "bf16_denominator_twenty_percent_off": Member(torch.bfloat16, "under bf16 autocast, a loss denominator 20% "
                                                                  "too large", denominator_factor=1.2),
}
"""The zoo: ``{name: Member}``; ``ZOO[name].dtype`` is the precision whose calibration applies."""


def _autocast(dtype: torch.dtype) -> Any:
    """bfloat16 autocast on the CPU for a bfloat16 run, nothing for a float32 (or float64) one."""
    return torch.autocast("cpu", dtype=torch.bfloat16) if dtype == torch.bfloat16 else nullcontext()


def zoo_run(name: str, problem: Problem, capture: Capture = snapshot) -> list[Any] | None:
    """Run zoo member ``name`` on this rank (inside ``run``, 2 ranks); rank 0 returns its captures."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.l05_optimizer_state_sharding import zero_optimizer_class

    member = ZOO[name]
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_model(problem, torch.float32)
    ddp = DDP(model)
    if member.zero1:
        opt = zero_optimizer_class()(model.parameters(), optimizer_class=torch.optim.Adam, lr=LR, betas=BETAS, eps=EPS)
        resume(opt.optim, model, problem)
    else:
        opt = build_adam(model, problem, RESUME_STEP + member.resume_offset, stored_as=member.moments_through)
    per_rank = ROWS // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    captured = []
    for x, y, mask in problem.batches:
        used_mask = torch.ones_like(mask) if member.count_padding else mask
        denominator = used_mask.sum().item() * OUT_FEATURES / world * member.denominator_factor  # DDP averages
        opt.zero_grad(set_to_none=True)
        with ddp.no_sync() if member.clip_before_average else nullcontext():
            with _autocast(member.dtype):
                out = ddp(x[rows])
            loss = masked_mse(out.float(), y[rows], used_mask[rows], denominator)
            loss.backward()
        if member.grad_scale_by_world:
            for p in model.parameters():
                p.grad.mul_(world)
        coef = _clip_then_average(model) if member.clip_before_average else clip(model)
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        global_loss /= world
        whole = _consolidated(opt, model) if member.zero1 else opt
        if rank == 0:
            captured.append(capture(model, whole, global_loss, coef, used_mask))
    return captured if rank == 0 else None


def _clip_then_average(model: nn.Module, max_norm: float = MAX_NORM) -> torch.Tensor:
    """Bug: clip this rank's local (not yet averaged) gradient by its own norm, then average over the ranks.

    Returns this rank's coefficient (float64, 0-dim).
    """
    coef = clip(model, max_norm)
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad.div_(dist.get_world_size())
    return coef


def _consolidated(opt: Any, model: nn.Module) -> torch.optim.Adam | None:
    """ZeroRedundancyOptimizer's sharded Adam state gathered on rank 0 (a collective), as a plain Adam."""
    opt.consolidate_state_dict(to=0)
    if dist.get_rank() != 0:
        return None
    whole = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    whole.load_state_dict(opt.state_dict())
    return whole


def run_zoo(problem: Problem | None = None, names: Sequence[str] | None = None, capture: Capture = snapshot
            ) -> dict[str, tuple[torch.dtype, list[Any]]]:
    """Run zoo members on 2 gloo ranks: ``{name: (compute dtype, rank 0's captures per step)}``."""
    from helpers.runtime.cluster import run

    problem = problem or make_problem()
    out = {}
    for name in names or ZOO:
        out[name] = (ZOO[name].dtype, run(lambda: zoo_run(name, problem, capture), world_size=2, timeout=60)[0])
    return out
