"""Lesson 09, equivalence tests: the update state, a float64 reference, a zoo of runs, checks.

An **update state** is a flat ``dict[str, torch.Tensor]`` captured right after an optimizer
step, with the keys

* ``"loss"``: the global (all-rank) loss of the step, a 0-dim tensor;
* ``"clip_coef"``: the gradient-clipping coefficient applied (1.0 when nothing was clipped);
* ``"mask"``: the bool mask of the rows that counted in the loss (whole global batch);
* ``"grad/<name>"``: the gradient the optimizer used (averaged and clipped);
* ``"param/<name>"``: the parameter after the step;
* ``"exp_avg/<name>"``, ``"exp_avg_sq/<name>"``, ``"step/<name>"``: Adam's state after the step.

Every run trains :class:`helpers.models.TinyMLP` for a few Adam steps with global-norm
clipping, resuming from the same "checkpoint" (parameters and an Adam state at step 1000),
so that bugs in the step counter or the second moment barely move the parameters: only a
checker that looks at the whole update state sees them. The reference is one process, full
batch, float64, small learning rate. The zoo runs on a gloo group of 2 ranks.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.models import TinyMLP

State = dict[str, torch.Tensor]
LR, BETAS, EPS, MAX_NORM, RESUME_STEP = 1e-5, (0.9, 0.999), 1e-8, 0.5, 1000
IN_FEATURES, OUT_FEATURES, ROWS = 8, 4, 16  # ROWS per global batch, split over the ranks


# --------------------------------------------------------------------------- the shared setup


@dataclass(frozen=True)
class Problem:
    """Everything a run needs: initial parameters, resumed Adam state, batches and masks."""

    init: dict[str, torch.Tensor]
    exp_avg: dict[str, torch.Tensor]
    exp_avg_sq: dict[str, torch.Tensor]
    batches: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # (x, y, mask of valid rows)


def make_problem(seed: int = 0, steps: int = 3) -> Problem:
    """A deterministic problem; the mask drops the last ``step + 1`` rows of each rank's half."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = TinyMLP(IN_FEATURES, 16, OUT_FEATURES)
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
        half = ROWS // 2
        mask[half - 1 - step: half] = False
        mask[ROWS - 1 - step:] = False
        batches.append((x, y, mask))
    return Problem(init, exp_avg, exp_avg_sq, batches)


def _model(problem: Problem, dtype: torch.dtype) -> nn.Module:
    model = TinyMLP(IN_FEATURES, 16, OUT_FEATURES).to(dtype)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(problem.init[n])
    return model


def _resume(optimizer: torch.optim.Optimizer, model: nn.Module, problem: Problem, step: int = RESUME_STEP,
            stored_as: torch.dtype | None = None) -> None:
    """Load the checkpointed Adam state into ``optimizer`` (every parameter it manages).

    ``stored_as``: the dtype the moments went through in the checkpoint (a bug when lower).
    """
    def restore(t: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        return (t if stored_as is None else t.to(stored_as)).to(p.dtype).clone()

    for n, p in model.named_parameters():
        if _manages(optimizer, p):
            optimizer.state[p] = {"step": torch.tensor(float(step)), "exp_avg": restore(problem.exp_avg[n], p),
                                  "exp_avg_sq": restore(problem.exp_avg_sq[n], p)}


def _manages(optimizer: torch.optim.Optimizer, p: torch.Tensor) -> bool:
    return any(p is q for group in optimizer.param_groups for q in group["params"])


def masked_mse(out: torch.Tensor, y: torch.Tensor, mask: torch.Tensor, denominator: float) -> torch.Tensor:
    """Sum of squared errors over the valid rows, divided by ``denominator`` (elements)."""
    return ((out - y) ** 2)[mask].sum() / denominator


def _clip(model: nn.Module, max_norm: float) -> torch.Tensor:
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    return torch.clamp(max_norm / (norm + 1e-6), max=1.0).to(torch.float64)


def reference_capture(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                      clip_coef: torch.Tensor, mask: torch.Tensor, state_of: Callable[[torch.Tensor], dict] | None = None
                      ) -> State:
    """The course's capture: detached float64 copies of everything the update depends on."""
    state_of = state_of or (lambda p: optimizer.state[p])
    out: State = {"loss": loss.detach().double().clone(), "clip_coef": torch.as_tensor(clip_coef).double().clone(),
                  "mask": mask.clone()}
    for n, p in model.named_parameters():
        st = state_of(p)
        out[f"grad/{n}"] = p.grad.detach().double().clone()
        out[f"param/{n}"] = p.detach().double().clone()
        out[f"exp_avg/{n}"] = st["exp_avg"].detach().double().clone()
        out[f"exp_avg_sq/{n}"] = st["exp_avg_sq"].detach().double().clone()
        out[f"step/{n}"] = torch.as_tensor(st["step"]).double().clone()
    return out


def reference_run(problem: Problem) -> list[State]:
    """Canonical float64 run: one process, the full batch, small steps; one state per step."""
    model = _model(problem, torch.float64)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    _resume(opt, model, problem)
    states = []
    for x, y, mask in problem.batches:
        opt.zero_grad(set_to_none=True)
        loss = masked_mse(model(x.double()), y.double(), mask, mask.sum().item() * OUT_FEATURES)
        loss.backward()
        coef = _clip(model, MAX_NORM)
        opt.step()
        states.append(reference_capture(model, opt, loss, coef, mask))
    return states


# --------------------------------------------------------------------------- the zoo (on gloo ranks)

ZOO = {
    # name: (compute dtype whose tolerances apply, what is wrong with it or None)
    "ddp_fp32": (torch.float32, None),
    "zero1_fp32": (torch.float32, None),
    "ddp_bf16_autocast": (torch.bfloat16, None),
    "grad_sum_not_mean": (torch.float32, "gradients summed over ranks, not averaged: clipping hides it "
                                         "everywhere but in the clip coefficient"),
    "resume_step_off_by_one": (torch.float32, "Adam's step counter resumed one too high: only the step differs"),
    "moments_resumed_in_bf16": (torch.float32, "Adam's moments checkpointed in bfloat16: only the moments differ"),
    "clip_local_norm": (torch.float32, "each rank clips with its own local norm"),
    "mask_counts_padding": (torch.float32, "padding rows counted as valid"),
    "loss_denominator_one_percent_off": (torch.float32, "a 1% wrong loss denominator: fp32-visible, "
                                                        "inside a bf16 tolerance"),
}


def zoo_run(name: str, problem: Problem) -> list[State] | None:
    """Run zoo member ``name`` on this rank (inside ``run``, 2 ranks); rank 0 returns the states."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from helpers.optim_sharding import zero_optimizer_class

    rank, world = dist.get_rank(), dist.get_world_size()
    model = _model(problem, torch.float32)
    ddp = DDP(model)
    zero = name.startswith("zero1")
    if zero:
        opt = zero_optimizer_class()(model.parameters(), optimizer_class=torch.optim.Adam, lr=LR, betas=BETAS, eps=EPS)
        _resume(opt.optim, model, problem)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
        _resume(opt, model, problem, RESUME_STEP + (name == "resume_step_off_by_one"),
                torch.bfloat16 if name == "moments_resumed_in_bf16" else None)
    per_rank = ROWS // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    states = []
    for step, (x, y, mask) in enumerate(problem.batches):
        xs, ys, ms = x[rows], y[rows], mask[rows]
        used_mask = torch.ones_like(mask) if name == "mask_counts_padding" else mask
        ms = used_mask[rows]
        denominator = used_mask.sum().item() * OUT_FEATURES / world  # DDP averages: scale by N
        if name == "loss_denominator_one_percent_off":
            denominator *= 1.01
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16) if name == "ddp_bf16_autocast" else nullcontext():
            out = ddp(xs)
        loss = masked_mse(out.float(), ys, ms, denominator)
        loss.backward()
        if name == "grad_sum_not_mean":
            for p in model.parameters():
                p.grad.mul_(world)
        if name == "clip_local_norm":
            coef = _clip_local_then_average(model, MAX_NORM)
        else:
            coef = _clip(model, MAX_NORM)
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        global_loss /= world
        state_of = _zero_state_reader(opt, model) if zero else None
        captured = reference_capture(model, opt, global_loss, coef, used_mask, state_of)
        if rank == 0:
            states.append(captured)
    return states if rank == 0 else None


def _clip_local_then_average(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Bug: clip with this rank's norm of the *local* share (grads already averaged by DDP)."""
    local = torch.stack([p.grad.norm() for p in model.parameters()]).norm() * dist.get_world_size() ** 0.5
    coef = torch.clamp(max_norm / (local + 1e-6), max=1.0)
    for p in model.parameters():
        p.grad.mul_(coef)
    return coef.double()


def _zero_state_reader(opt: Any, model: nn.Module) -> Callable[[torch.Tensor], dict] | None:
    """Consolidate ZeroRedundancyOptimizer's sharded Adam state on rank 0 (a collective) and read it."""
    opt.consolidate_state_dict(to=0)
    if dist.get_rank() != 0:
        return lambda p: {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
    by_index = opt.state_dict()["state"]
    by_param = {id(p): by_index[i] for i, p in enumerate(model.parameters())}
    return lambda p: by_param[id(p)]


# --------------------------------------------------------------------------- the checker (references)

TOLERANCE_ULPS = 64  # a run may drift this many machine epsilons (relative, in 2-norm) from the reference


def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in ``dtype``: ``64 * finfo(dtype).eps``."""
    return TOLERANCE_ULPS * torch.finfo(dtype).eps


def tensors_match(reference: torch.Tensor, candidate: torch.Tensor, rtol: float) -> bool:
    """Same shape and ``||c - r||_2 <= rtol * ||r||_2 + 1e-12`` in float64; bool tensors exactly."""
    if reference.shape != candidate.shape:
        return False
    if reference.dtype == torch.bool or candidate.dtype == torch.bool:
        return torch.equal(reference.bool(), candidate.bool())
    r, c = reference.double(), candidate.double()
    return bool((c - r).norm() <= rtol * r.norm() + 1e-12)


def compare_update_states(reference: State, candidate: State, dtype: torch.dtype) -> list[str]:
    """Sorted keys of ``reference`` that are missing from ``candidate`` or differ beyond tolerance.

    ``step/*`` keys compare exactly (a counter is an integer); everything else with
    :func:`tensors_match` at :func:`tolerance` of ``dtype``.
    """
    rtol = tolerance(dtype)
    bad = []
    for key, ref in reference.items():
        cand = candidate.get(key)
        exact = key.startswith("step/")
        if cand is None or not tensors_match(ref, cand, 0.0 if exact else rtol):
            bad.append(key)
    return sorted(bad)


def first_divergence(reference_steps: Sequence[State], candidate_steps: Sequence[State], dtype: torch.dtype
                     ) -> tuple[int, list[str]] | None:
    """``(step index, differing keys)`` of the first step whose update state differs, else ``None``."""
    for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
        bad = compare_update_states(ref, cand, dtype)
        if bad:
            return step, bad
    return None


def run_zoo(problem: Problem | None = None, names: Sequence[str] | None = None
            ) -> dict[str, tuple[torch.dtype, list[State]]]:
    """Run zoo members on 2 gloo ranks: ``{name: (compute dtype, rank 0's states)}``."""
    from helpers.cluster import run

    problem = problem or make_problem()
    out = {}
    for name in names or ZOO:
        states = run(lambda: zoo_run(name, problem), world_size=2, timeout=60)[0]
        out[name] = (ZOO[name][0], states)
    return out


# --------------------------------------------------------------------------- drivers and checks


def capture_run(capture_fn: Callable[..., State], problem: Problem | None = None) -> tuple[list[State], list[State]]:
    """Train float32 single-process Adam with clipping; capture every step with ``capture_fn`` and the reference.

    Returns ``(captured by capture_fn, captured by reference_capture)``. The student's
    captures are kept across later steps, so a capture that aliases live tensors shows up.
    """
    problem = problem or make_problem()
    model = _model(problem, torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=BETAS, eps=EPS)
    _resume(opt, model, problem)
    mine, ref = [], []
    for x, y, mask in problem.batches:
        opt.zero_grad(set_to_none=False)
        loss = masked_mse(model(x), y, mask, mask.sum().item() * OUT_FEATURES)
        loss.backward()
        coef = _clip(model, MAX_NORM).float()
        opt.step()
        mine.append(capture_fn(model, opt, loss, coef, mask))
        ref.append(reference_capture(model, opt, loss, coef, mask))
    return mine, ref


def assert_capture(capture_fn: Callable[..., State], problem: Problem | None = None) -> None:
    """``capture_fn`` returns every key, as float64 copies (bool mask) that later steps do not change."""
    mine, ref = capture_run(capture_fn, problem)
    for step, (got, exp) in enumerate(zip(mine, ref)):
        if not isinstance(got, dict):
            raise AssertionError(f"capture_update_state must return a dict, got {type(got).__name__}")
        missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
        if missing or extra:
            raise AssertionError(f"step {step}: keys missing {missing[:6]}{'...' if len(missing) > 6 else ''}, "
                                 f"unexpected {extra[:6]}. Expected loss, clip_coef, mask and grad/, param/, "
                                 f"exp_avg/, exp_avg_sq/, step/ for every named parameter.")
        for key, value in exp.items():
            value_got = got[key]
            if not isinstance(value_got, torch.Tensor) or value_got.dtype != value.dtype or value_got.shape != value.shape:
                raise AssertionError(f"step {step}, {key!r}: expected a {value.dtype} tensor of shape "
                                     f"{tuple(value.shape)}, got {_describe(value_got)}.")
            if not torch.equal(value_got, value):
                later = " It changed after it was captured: store copies (detach().clone()), not the live tensors." \
                    if step < len(ref) - 1 else ""
                raise AssertionError(f"step {step}, {key!r}: the captured value differs from the model's state "
                                     f"right after that step.{later}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:80]


def assert_tolerance(fn: Callable[[torch.dtype], float]) -> None:
    """``fn(dtype)`` is ``64 * finfo(dtype).eps`` for every floating dtype."""
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16):
        got, exp = fn(dtype), tolerance(dtype)
        if not isinstance(got, float) or abs(got - exp) > 1e-9 * exp:
            values = {str(d).removeprefix("torch."): fn(d) for d in (torch.float32, torch.bfloat16)}
            same = " One tolerance for every dtype either fails a correct bf16 run or passes a broken fp32 one." \
                if len(set(values.values())) == 1 else ""
            raise AssertionError(f"tolerance({dtype}) returned {got!r}, expected 64 * torch.finfo({dtype}).eps = "
                                 f"{exp:.6g}.{same}")


def synthetic_cases(problem: Problem | None = None) -> list[tuple[str, State, State, torch.dtype]]:
    """``(description, reference, candidate, dtype)`` cases built from the reference's first state."""
    ref = reference_run(problem or make_problem())[0]
    g = torch.Generator().manual_seed(1)

    def edit(**changes: Callable[[str, torch.Tensor], torch.Tensor | None]) -> State:
        out = {}
        for key, value in ref.items():
            value = value.clone()
            for family, change in changes.items():
                if key.split("/")[0] == family or key == family:
                    value = change(key, value)
            if value is not None:
                out[key] = value
        return out

    noise = lambda scale: lambda k, v: v * (1 + scale * torch.randn(v.shape, generator=g, dtype=v.dtype))  # noqa: E731
    def one_outlier(key: str, v: torch.Tensor) -> torch.Tensor:
        """The element closest to zero moves by 1e-3 of the tensor's norm: huge elementwise, tiny norm-wise."""
        flat = v.flatten().clone()
        flat[flat.abs().argmin()] += 1e-3 * v.norm()
        return flat.view_as(v)

    return [
        ("identical", ref, edit(), torch.float32),
        ("float32 rounding of everything", ref, {k: v.float() if v.is_floating_point() else v for k, v in ref.items()},
         torch.float32),
        ("gradients off by 1e-4 (relative): visible in fp32", ref, edit(grad=noise(1e-4)), torch.float32),
        ("gradients off by 1e-4 (relative): inside bf16's tolerance", ref, edit(grad=noise(1e-4)), torch.bfloat16),
        ("step counter one too high", ref, edit(step=lambda k, v: v + 1), torch.bfloat16),
        ("moments rounded to bfloat16", ref, edit(exp_avg=lambda k, v: v.bfloat16().double(),
                                                   exp_avg_sq=lambda k, v: v.bfloat16().double()), torch.float32),
        ("one mask entry flipped", ref, edit(mask=lambda k, v: v ^ (torch.arange(v.numel()) == 3)), torch.bfloat16),
        ("the loss alone is off", ref, edit(loss=lambda k, v: v * 1.01), torch.float32),
        ("clip coefficient alone is off", ref, edit(clip_coef=lambda k, v: v * 0.5), torch.float32),
        ("one element off by 1e-3 of the tensor's norm: bf16 accepts it", ref, edit(param=one_outlier), torch.bfloat16),
        ("parameters missing", ref, edit(param=lambda k, v: None), torch.float32),
        ("a flattened parameter", ref, edit(param=lambda k, v: v.flatten()), torch.bfloat16),
    ]


def assert_compare(fn: Callable[[State, State, torch.dtype], list[str]],
                   cases: Sequence[tuple[str, State, State, torch.dtype]]) -> None:
    """``fn`` returns the reference's sorted list of differing keys on every case."""
    for description, ref, cand, dtype in cases:
        exp = compare_update_states(ref, cand, dtype)
        got = fn(ref, cand, dtype)
        if not isinstance(got, list) or sorted(got) != got or got != exp:
            families = sorted({k.split("/")[0] for k in exp})
            raise AssertionError(
                f"case '{description}' ({dtype}): compare_update_states returned {_short(got)}, expected "
                f"{_short(exp)} (key families {families}).{_compare_hint(got, exp)}")


def _short(keys: Any) -> str:
    if not isinstance(keys, list):
        return repr(keys)[:80]
    return repr(keys) if len(keys) <= 5 else repr(keys[:5])[:-1] + f", ... ({len(keys)} keys)]"


def _compare_hint(got: Any, exp: list[str]) -> str:
    if not isinstance(got, list):
        return " Return a sorted list of keys."
    missed = {k.split("/")[0] for k in set(exp) - set(got)}
    if missed:
        return f" Keys of families {sorted(missed)} were not flagged: compare every key of the reference."
    if set(got) - set(exp):
        return (" Extra keys were flagged: use the 2-norm relative error per tensor at tolerance(dtype), "
                "compare step/ keys exactly.")
    return " Sort the keys."


def assert_first_divergence(fn: Callable[..., tuple[int, list[str]] | None]) -> None:
    """``fn`` finds the first diverging step (and its keys) in synthetic runs."""
    cases = synthetic_cases()
    ref = cases[0][1]
    same, step_bug, grad_bug = cases[0][2], cases[4][2], cases[2][2]
    for description, refs, cands, dtype in [
        ("no divergence", [ref] * 3, [same] * 3, torch.float32),
        ("divergence from step 1", [ref] * 3, [same, grad_bug, step_bug], torch.float32),
        ("divergence at the last step", [ref] * 3, [same, same, step_bug], torch.float32),
        ("fp32-visible gradient error under a bf16 tolerance: no divergence", [ref] * 2, [grad_bug, same],
         torch.bfloat16),
    ]:
        exp, got = first_divergence(refs, cands, dtype), fn(refs, cands, dtype)
        if _as_verdict(got) != exp:
            raise AssertionError(f"first_divergence on '{description}' returned {got!r:.120}, expected {exp!r:.120}.")


def assert_zoo(fn: Callable[..., tuple[int, list[str]] | None], runs: dict[str, tuple[torch.dtype, list[State]]],
               reference_steps: Sequence[State], also_as: torch.dtype | None = None) -> None:
    """On every zoo run, ``fn`` gives the reference checker's verdict (with the run's dtype, and ``also_as``)."""
    for name, (dtype, states) in runs.items():
        for as_dtype in {dtype, also_as or dtype}:
            exp, got = first_divergence(reference_steps, states, as_dtype), fn(reference_steps, states, as_dtype)
            if _as_verdict(got) != exp:
                wrong = ZOO[name][1] or "nothing: it is a correct run"
                raise AssertionError(
                    f"zoo run '{name}' checked as {as_dtype}: your checker says {_verdict(got)}, the reference "
                    f"checker says {_verdict(exp)}. What is wrong with this run: {wrong}.")


def _as_verdict(value: Any) -> Any:
    """A student's ``first_divergence`` result as ``(int, list)`` or ``None``; malformed values unchanged."""
    try:
        return None if value is None else (int(value[0]), list(value[1]))
    except (TypeError, IndexError, ValueError, KeyError):
        return value


def _verdict(v: Any) -> str:
    if v is None:
        return "equivalent"
    if isinstance(v, tuple) and len(v) == 2:
        return f"diverges at step {v[0]} in {sorted({k.split('/')[0] for k in v[1]})}"
    return repr(v)[:80]
