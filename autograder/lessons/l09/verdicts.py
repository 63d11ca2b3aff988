"""Lesson 09, equivalence tests: the reference checker and the hidden checks.

An **update state** is a flat ``dict[str, torch.Tensor]`` captured right after an optimizer
step, every value a float64 copy (the mask bool), with the keys

* ``"loss"``: the global (all-rank) loss of the step, a 0-dim tensor;
* ``"clip_coef"``: the gradient-clipping coefficient applied (1.0 when nothing was clipped);
* ``"mask"``: the bool mask of the rows that counted in the loss (whole global batch);
* ``"grad/<name>"``: the gradient the optimizer used (averaged and clipped);
* ``"param/<name>"``: the parameter after the step;
* ``"exp_avg/<name>"``, ``"exp_avg_sq/<name>"``, ``"step/<name>"``: Adam's state after the step.

The runs themselves (the problem, the float64 reference, the zoo on gloo ranks) are
student-side (:mod:`helpers.l09_equivalence_tests`); here their snapshots become update states, the
reference checker judges them, and the checks pass a student's values through
:mod:`autograder.plain` before comparing. Tolerances are relative, in the 2-norm, and
calibrated per key: ``SAFETY`` (4) times the worst error a known-correct single-process run at
the same precision (:func:`helpers.l09_equivalence_tests.calibration_run`) makes against the float64
reference, never below float32's epsilon.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import torch
from torch import nn

from autograder.plain import plain
from helpers import l09_equivalence_tests as eq
from helpers.l09_equivalence_tests import dtype_name, key_family
from helpers.runtime.remote import call

from .drivers import capture_steps

State = dict[str, torch.Tensor]
Verdict = tuple[int, list[str]] | None
SAFETY = 4.0  # a tolerance is this many times the error a known-correct run at the same precision makes
FLOOR = torch.finfo(torch.float32).eps  # no error below float32's epsilon is calibrated (weights are float32)
ABS_SLACK = 1e-12  # absolute slack of a comparison, so that zero tensors compare equal
PRECISIONS = (torch.float32, torch.bfloat16)  # the precisions with a calibration run
# A key whose error is within this factor of its tolerance (tolerance ratio in [1/2, 2]) may pass on one CPU
# and fail on another: float32 tolerances move by up to ~1.5x between CPUs (their calibration errors sit near
# the floor), and a correct float32 run's errors near the floor move by more, but stay below half of 4 eps.
MARGIN = 2.0


# --------------------------------------------------------------------------- references


def update_state(snap: dict[str, Any]) -> State:
    """The update state of a :func:`helpers.l09_equivalence_tests.snapshot` (float64 copies, mask bool)."""
    state: State = {"loss": snap["loss"].double().clone(), "clip_coef": snap["clip_coef"].double().clone(),
                    "mask": snap["mask"].clone()}
    for index, name in enumerate(snap["params"]):
        adam = snap["adam"][index]
        state[f"grad/{name}"] = snap["grads"][name].double().clone()
        state[f"param/{name}"] = snap["params"][name].double().clone()
        state[f"exp_avg/{name}"] = adam["exp_avg"].double().clone()
        state[f"exp_avg_sq/{name}"] = adam["exp_avg_sq"].double().clone()
        state[f"step/{name}"] = torch.as_tensor(adam["step"]).double().clone()
    return state


def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                         clip_coef: torch.Tensor, mask: torch.Tensor) -> State:
    """Reference of exercise 1: the update state right after ``optimizer.step()``."""
    return update_state(eq.snapshot(model, optimizer, loss, clip_coef, mask))


def exact(key: str, reference: torch.Tensor) -> bool:
    """Step counters (integers stored as floats) and bool tensors compare exactly."""
    return key.startswith("step/") or reference.dtype == torch.bool


def calibrate_tolerances(reference_steps: Sequence[State], calibration_steps: Sequence[State]) -> dict[str, float]:
    """Reference of exercise 2: per key, ``SAFETY * max(FLOOR, worst relative 2-norm error of the calibration run)``.

    Every key of ``reference_steps[0]`` except the exact ones (``step/*``, bool); the error of a
    step is ``||c - r||_2 / ||r||_2`` in float64, the worst is over all steps.
    """
    tolerances = {}
    for key, first in reference_steps[0].items():
        if exact(key, first):
            continue
        worst = max(relative_error(r[key], c[key]) for r, c in zip(reference_steps, calibration_steps))
        tolerances[key] = SAFETY * max(FLOOR, worst)
    return tolerances


def tensors_match(reference: torch.Tensor, candidate: torch.Tensor, rtol: float) -> bool:
    """Same shape and ``||c - r||_2 <= rtol * ||r||_2 + 1e-12`` in float64; bool tensors exactly."""
    if reference.shape != candidate.shape:
        return False
    if reference.dtype == torch.bool or candidate.dtype == torch.bool:
        return torch.equal(reference.bool(), candidate.bool())
    r, c = reference.double(), candidate.double()
    return bool((c - r).norm() <= rtol * r.norm() + ABS_SLACK)


def compare_update_states(reference: State, candidate: State, tolerances: dict[str, float]) -> list[str]:
    """Reference of exercise 3: sorted keys of ``reference`` missing from ``candidate`` or differing.

    ``step/*`` and bool keys compare exactly; every other key with :func:`tensors_match` at
    ``tolerances[key]``.
    """
    return sorted(key for key, ref in reference.items()
                  if key not in candidate
                  or not tensors_match(ref, candidate[key], 0.0 if exact(key, ref) else tolerances[key]))


def first_divergence(reference_steps: Sequence[State], candidate_steps: Sequence[State],
                     tolerances: dict[str, float]) -> Verdict:
    """Reference of exercise 4: ``(step index, differing keys)`` of the first differing step, else ``None``."""
    for step, (ref, cand) in enumerate(zip(reference_steps, candidate_steps)):
        bad = compare_update_states(ref, cand, tolerances)
        if bad:
            return step, bad
    return None


# --------------------------------------------------------------------------- runs as update states


def reference_run(problem: eq.Problem | None = None) -> list[State]:
    """The float64 reference's update states, one per step."""
    return [update_state(s) for s in eq.reference_run(problem)]


def calibration(problem: eq.Problem | None = None, dtype: torch.dtype = torch.float32) -> list[State]:
    """The known-correct calibration run at ``dtype``'s precision, as update states."""
    return [update_state(s) for s in eq.calibration_run(problem, dtype)]


def precision_tolerances(problem: eq.Problem | None = None, reference: Sequence[State] | None = None
                         ) -> dict[torch.dtype, dict[str, float]]:
    """``{float32: tolerances, bfloat16: tolerances}`` calibrated on ``problem``."""
    problem = problem or eq.make_problem()
    reference = reference or reference_run(problem)
    return {d: calibrate_tolerances(reference, calibration(problem, d)) for d in PRECISIONS}


def run_zoo(problem: eq.Problem | None = None, names: Sequence[str] | None = None
            ) -> dict[str, tuple[torch.dtype, list[State]]]:
    """Zoo members on 2 gloo ranks as update states: ``{name: (precision, states per step)}``."""
    return {name: (dtype, [update_state(s) for s in snaps])
            for name, (dtype, snaps) in eq.run_zoo(problem, names).items()}


@functools.lru_cache(maxsize=1)
def measured_zoo() -> tuple[list[State], dict[torch.dtype, dict[str, float]],
                             dict[str, tuple[torch.dtype, list[State]]]]:
    """The reference, the calibrated tolerances and the whole zoo on the default problem (runs once per process)."""
    reference = reference_run()
    return reference, precision_tolerances(reference=reference), run_zoo()


def capture_run(capture_fn: Callable[..., Any], problem: eq.Problem | None = None,
                dtype: torch.dtype = torch.float32, groups: bool = False) -> tuple[list[Any], list[State]]:
    """Train single-process Adam with clipping in ``dtype``, capturing every step with ``capture_fn``.

    Returns ``(what capture_fn returned, the reference's states)``. The same deterministic
    training (:func:`capture_steps`) runs twice: where ``capture_fn`` lives (in the notebook's
    kernel when graded), calling it after every step, and here, taking PyTorch's own view of
    each step (:func:`helpers.l09_equivalence_tests.snapshot`), of which the reference's update states
    are made. Nothing the notebook's code does (patching ``helpers``, editing the model)
    reaches the reference. ``groups``: an Adam with two parameter groups, listed (and their
    state restored) in another order than ``model.named_parameters()``.
    """
    problem = problem or eq.make_problem()
    mine = call(capture_steps, capture_fn, problem, dtype, groups)
    return mine, [update_state(s) for s in capture_steps(eq.snapshot, problem, dtype, groups)]


Case = tuple[str, State, State, dict[str, float]]


def synthetic_cases(problem: eq.Problem | None = None) -> list[Case]:
    """``(description, reference, candidate, tolerances)`` built from the reference's first state and
    the tolerances calibrated at float32 and at bfloat16 on the same problem."""
    problem = problem or eq.make_problem()
    reference = reference_run(problem)
    ref = reference[0]
    tol = precision_tolerances(problem, reference)
    fp32, bf16 = tol[torch.float32], tol[torch.bfloat16]
    g = torch.Generator().manual_seed(1)

    def edit(**changes: Callable[[str, torch.Tensor], torch.Tensor | None]) -> State:
        out = {}
        for key, value in ref.items():
            value = value.clone()
            for family, change in changes.items():
                if key_family(key) == family:
                    value = change(key, value)
            if value is not None:
                out[key] = value
        return out

    def noise(scale: float) -> Callable[[str, torch.Tensor], torch.Tensor]:
        return lambda k, v: v * (1 + scale * torch.randn(v.shape, generator=g, dtype=v.dtype))

    def one_outlier(key: str, v: torch.Tensor) -> torch.Tensor:
        """The element closest to zero moves by 1e-3 of the tensor's norm: huge elementwise, tiny norm-wise."""
        flat = v.flatten().clone()
        flat[flat.abs().argmin()] += 1e-3 * v.norm()
        return flat.view_as(v)

    def to_bf16(k: str, v: torch.Tensor) -> torch.Tensor:
        return v.bfloat16().double()

    def half_tolerance_outlier(key: str, v: torch.Tensor) -> torch.Tensor:
        """The largest element moves by half the key's float32 tolerance times the tensor's 2-norm: the tensor
        passes (relative 2-norm error 0.5 tol), its largest element alone is off by more than tol of itself."""
        flat = v.flatten().clone()
        flat[flat.abs().argmax()] += 0.5 * fp32[key] * v.norm()
        return flat.view_as(v)

    def reordered(state: State) -> State:
        return dict(reversed(list(state.items())))

    big_steps = {k: v + 1e6 if key_family(k) == "step" else v for k, v in ref.items()}
    huge_steps = {k: torch.full_like(v, 2.0 ** 24) if key_family(k) == "step" else v for k, v in ref.items()}
    unused = [k for k in ref if key_family(k) == "grad"][-1]   # a parameter that got no gradient: a zero tensor
    zero_grad = {**ref, unused: torch.zeros_like(ref[unused])}
    flagged = {**ref, "skipped": torch.tensor(False)}         # a second bool tensor (not in the tolerances)
    return [
        ("identical", ref, edit(), fp32),
        ("float32 rounding of everything", ref, {k: v.float() if v.is_floating_point() else v for k, v in ref.items()},
         fp32),
        ("gradients off by 1e-4 (relative): visible at float32", ref, edit(grad=noise(1e-4)), fp32),
        ("gradients off by 1e-4 (relative): inside bfloat16's calibration", ref, edit(grad=noise(1e-4)), bf16),
        ("step counter one too high", ref, edit(step=lambda k, v: v + 1), bf16),
        ("moments rounded to bfloat16, float32 run", ref, edit(exp_avg=to_bf16, exp_avg_sq=to_bf16), fp32),
        ("moments rounded to bfloat16, bfloat16 run: only the tight keys see it", ref,
         edit(exp_avg=to_bf16, exp_avg_sq=to_bf16), bf16),
        ("one mask entry flipped", ref, edit(mask=lambda k, v: v ^ (torch.arange(v.numel()) == 3)), bf16),
        ("the loss alone is 1% off, float32 run", ref, edit(loss=lambda k, v: v * 1.01), fp32),
        ("the loss alone is 1% off, bfloat16 run", ref, edit(loss=lambda k, v: v * 1.01), bf16),
        ("clip coefficient alone is off", ref, edit(clip_coef=lambda k, v: v * 0.5), fp32),
        ("one element off by 1e-3 of the tensor's norm, bfloat16 run", ref, edit(param=one_outlier), bf16),
        ("parameters off by 1e-5 (relative), bfloat16 run", ref, edit(param=noise(1e-5)), bf16),
        ("parameters missing", ref, edit(param=lambda k, v: None), fp32),
        ("a flattened parameter", ref, edit(param=lambda k, v: v.flatten()), bf16),
        ("a NaN in every gradient", ref, edit(grad=lambda k, v: v.flatten().index_fill(0, torch.tensor([0]),
                                                                                    math.nan).view_as(v)), bf16),
        ("an inf parameter element and a NaN loss", ref,
         edit(param=lambda k, v: v.flatten().index_fill(0, torch.tensor([0]), math.inf).view_as(v),
              loss=lambda k, v: torch.full_like(v, math.nan)), bf16),
        ("resumed at step 10**6, the counter one too high", big_steps, edit(step=lambda k, v: v + 1e6 + 1), bf16),
        ("resumed at step 10**6, the same counter", big_steps, edit(step=lambda k, v: v + 1e6), bf16),
        ("at step 2**24 (float32 cannot hold 2**24 + 1), the counter one too high", huge_steps,
         {k: v + 1 if key_family(k) == "step" else v for k, v in huge_steps.items()}, bf16),
        ("the largest element of every tensor off by half its float32 tolerance (in the 2-norm)", ref,
         edit(grad=half_tolerance_outlier, param=half_tolerance_outlier, exp_avg=half_tolerance_outlier,
              exp_avg_sq=half_tolerance_outlier), fp32),
        ("a zero gradient, the candidate's zero", zero_grad, dict(zero_grad), fp32),
        ("a zero gradient, the candidate 1e-13 off (within the absolute slack 1e-12)", zero_grad,
         {**zero_grad, unused: torch.full_like(ref[unused], 1e-13)}, fp32),
        ("a zero gradient, the candidate 1e-6 off", zero_grad,
         {**zero_grad, unused: torch.full_like(ref[unused], 1e-6)}, fp32),
        ("the candidate has a key the reference does not", ref,
         {**ref, "param/extra.weight": torch.randn(3, 2, generator=g, dtype=torch.float64)}, fp32),
        ("the candidate lists its keys in another order, the loss 1% off", ref,
         reordered(edit(loss=lambda k, v: v * 1.01)), fp32),
        ("a second bool tensor, flipped", flagged, {**flagged, "skipped": torch.tensor(True)}, fp32),
    ]


def calibration_cases(problem: eq.Problem | None = None) -> list[tuple[str, list[State], list[State]]]:
    """``(description, reference_steps, calibration_steps)`` for exercise 2's hidden checks."""
    problem = problem or eq.make_problem()
    reference = reference_run(problem)
    g = torch.Generator().manual_seed(2)
    worst_in_middle = [{k: v.clone() for k, v in s.items()} for s in reference]
    for key, value in worst_in_middle[1].items():
        if value.is_floating_point() and not key.startswith("step/"):
            value.mul_(1 + 1e-3 * torch.randn(value.shape, generator=g, dtype=value.dtype))
    float32, bfloat16 = calibration(problem, torch.float32), calibration(problem, torch.bfloat16)
    return [
        ("float32 calibration run", reference, float32),
        ("bfloat16 calibration run", reference, bfloat16),
        ("bfloat16 calibration run, its states listing the keys in another order", reference,
         [dict(reversed(list(s.items()))) for s in bfloat16]),
        ("float32 calibration run, the states holding a second bool tensor", [{**s, "skipped": torch.tensor(False)}
                                                                              for s in reference],
         [{**s, "skipped": torch.tensor(False)} for s in float32]),
        ("a calibration equal to the reference (every error 0)", reference, _copies(reference)),
        ("the worst error at the middle step", reference, worst_in_middle),
        ("float32 rounding of the reference", reference,
         [{k: v.float() if v.is_floating_point() else v for k, v in s.items()} for s in reference]),
    ]


# --------------------------------------------------------------------------- hidden checks


def _copies(states: Sequence[State]) -> list[State]:
    """Fresh copies for a student's function, so that it cannot edit what the next check uses."""
    return [{k: v.clone() for k, v in s.items()} for s in states]


def check_capture(capture_fn: Callable[..., Any], problem: eq.Problem | None = None,
                   dtype: torch.dtype = torch.float32, groups: bool = False) -> None:
    """``capture_fn`` returns every key, as float64 copies (bool mask) that later steps do not change.

    ``groups``: the optimizer has two parameter groups in another order than the model's parameters."""
    mine, ref = capture_run(capture_fn, problem, dtype, groups)
    grouped = (" The optimizer has several parameter groups, in another order than model.named_parameters(): "
               "read each parameter's state as optimizer.state[p]." if groups else "")
    for step, (raw, exp) in enumerate(zip(mine, ref)):
        got = plain(raw, f"capture_update_state's result at step {step}")  # read only now: aliasing shows
        if type(got) is not dict:
            raise AssertionError(f"capture_update_state must return a dict, got {type(raw).__name__}")
        missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
        if missing or extra:
            raise AssertionError(f"step {step}: keys missing {missing[:6]}{'...' if len(missing) > 6 else ''}, "
                                 f"unexpected {extra[:6]}. Expected loss, clip_coef, mask and grad/, param/, "
                                 f"exp_avg/, exp_avg_sq/, step/ for every named parameter.")
        for key, value in exp.items():
            value_got = got[key]
            if type(value_got) is not torch.Tensor or value_got.dtype != value.dtype or value_got.shape != value.shape:
                raise AssertionError(f"step {step}, {key!r}: expected a {value.dtype} tensor of shape "
                                     f"{tuple(value.shape)}, got {_describe(value_got)}.{grouped}")
            if not torch.equal(value_got, value):
                itself = ", where .double() returns the tensor itself" if dtype == torch.float64 else ""
                later = (f" Did it change after it was captured (a {dtype} model{itself}; the caller's mask, loss "
                         f"and clip_coef are changed afterwards)? Store copies (.detach().double().clone(), the mask "
                         f".clone()), not the live tensors.{grouped}")
                raise AssertionError(f"step {step}, {key!r}: the captured value differs from the model's state "
                                     f"right after that step.{later}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {value!r}"[:80]


def check_calibrate(fn: Callable[[list[State], list[State]], Any],
                     cases: Sequence[tuple[str, list[State], list[State]]]) -> None:
    """``fn`` returns the reference's tolerance for every key (floats, relative 1e-9), on every case."""
    for description, reference, calibrated in cases:
        exp = calibrate_tolerances(reference, calibrated)
        got = plain(fn(_copies(reference), _copies(calibrated)), "calibrate_tolerances' result")
        if type(got) is not dict:
            raise AssertionError(f"calibrate_tolerances must return a dict of floats, got {type(got).__name__}")
        missing, extra = sorted(set(exp) - set(got)), sorted(set(got) - set(exp))
        if missing or extra:
            raise AssertionError(f"case '{description}': keys missing {_short(missing)}, unexpected {_short(extra)}. "
                                 f"Every key of the reference except step/ counters and bool tensors.")
        for key, value in exp.items():
            if type(got[key]) is not float:
                raise AssertionError(f"case '{description}', {key!r}: return a Python float, got "
                                     f"{type(got[key]).__name__}")
            if not abs(got[key] - value) <= 1e-9 * value:
                raise AssertionError(
                    f"case '{description}', {key!r}: tolerance {got[key]:.6g}, expected {value:.6g} = {SAFETY:g} * "
                    f"max(float32 eps, worst relative 2-norm error over all steps).")


def check_compare(fn: Callable[[State, State, dict[str, float]], Any], cases: Sequence[Case]) -> None:
    """``fn`` returns the reference's sorted list of differing keys on every case."""
    for description, ref, cand, tolerances in cases:
        exp = compare_update_states(ref, cand, tolerances)
        raw = fn(*_copies([ref, cand]), dict(tolerances))
        got = plain(raw, "compare_update_states' result")
        if got != exp:
            families = sorted({key_family(k) for k in exp})
            raise AssertionError(
                f"case '{description}': compare_update_states returned {_short(got)}, expected "
                f"{_short(exp)} (key families {families}).{_compare_hint(got, exp, ref, cand)}")


def _short(keys: Any) -> str:
    if type(keys) is not list:
        return repr(keys)[:80]
    return repr(keys) if len(keys) <= 5 else repr(keys[:5])[:-1] + f", ... ({len(keys)} keys)]"


def _compare_hint(got: Any, exp: list[str], reference: State, candidate: State) -> str:
    if type(got) is not list:
        return " Return a sorted list of keys."
    if any(type(k) is str and k not in reference for k in got):
        return " Report the reference's keys only: a key the candidate has and the reference does not is not reported."
    if any(type(k) is str and k not in exp and k in candidate and not bool(reference[k].double().norm())
           for k in got):
        return (" A zero reference tensor passes when ||c - r|| <= tolerances[key] * ||r|| + 1e-12: the absolute "
                "1e-12 is the whole bound there (and 0 / 0 is NaN: do not divide by ||r||).")
    missed_keys = set(exp) - set(got)
    missed = {key_family(k) for k in missed_keys}
    if any(k in candidate and not bool(candidate[k].double().isfinite().all()) for k in missed_keys):
        return (" The candidate holds NaN or inf there: every comparison with NaN is False, so test that the error "
                "is within the bound (error <= bound), not that it exceeds it.")
    if missed == {"step"}:
        return (" Step counters compare exactly: at step 10**6 a relative tolerance (torch.allclose's default "
                "included) cannot tell n from n + 1.")
    if missed:
        return (f" Keys of families {sorted(missed)} were not flagged: compare every key of the reference, each "
                f"at its own tolerance tolerances[key].")
    if set(got) - set(exp):
        return (" Extra keys were flagged: use the 2-norm relative error per tensor at tolerances[key], "
                "compare step/ keys and bool tensors exactly.")
    return " Sort the keys, each once."


def _divergence(fn: Callable[..., Any], reference_steps: Sequence[State], candidate_steps: Sequence[State],
                tolerances: dict[str, float]) -> Any:
    """A student's ``first_divergence`` on copies, as ``(int, list)`` or ``None``; malformed values unchanged."""
    value = plain(fn(_copies(reference_steps), _copies(candidate_steps), dict(tolerances)), "first_divergence's result")
    if type(value) in (tuple, list) and len(value) == 2 and type(value[0]) is int and type(value[1]) in (tuple, list):
        return value[0], list(value[1])
    return value


def check_first_divergence(fn: Callable[..., Any]) -> None:
    """``fn`` finds the first diverging step (and its keys) in synthetic runs."""
    cases = synthetic_cases()
    ref, fp32, bf16 = cases[0][1], cases[0][3], cases[3][3]
    same, step_bug, grad_bug = cases[0][2], cases[4][2], cases[2][2]
    for description, refs, cands, tolerances in [
        ("no divergence", [ref] * 3, [same] * 3, fp32),
        ("divergence at step 0 only", [ref] * 3, [grad_bug, same, same], fp32),
        ("divergence from step 1", [ref] * 3, [same, grad_bug, step_bug], fp32),
        ("divergence at the last step", [ref] * 3, [same, same, step_bug], fp32),
        ("float32-visible gradient error under bfloat16 tolerances: no divergence", [ref] * 2, [grad_bug, same], bf16),
    ]:
        exp, got = first_divergence(refs, cands, tolerances), _divergence(fn, refs, cands, tolerances)
        if got != exp:
            raise AssertionError(f"first_divergence on '{description}' returned {got!r:.120}, expected {exp!r:.120}.")


def check_zoo(fn: Callable[..., Any], runs: dict[str, tuple[torch.dtype, list[State]]],
               reference_steps: Sequence[State], tolerances: dict[torch.dtype, dict[str, float]],
               also_as: torch.dtype | None = None) -> None:
    """On every zoo run, ``fn`` gives the reference checker's verdict (at the run's precision, and ``also_as``)."""
    for name, (dtype, states) in runs.items():
        for as_dtype in dict.fromkeys([dtype, also_as or dtype]):
            tol = tolerances[as_dtype]
            exp, got = first_divergence(reference_steps, states, tol), _divergence(fn, reference_steps, states, tol)
            if got != exp:
                wrong = eq.ZOO[name].bug or "nothing: it is a correct run"
                raise AssertionError(
                    f"zoo run '{name}' checked with {dtype_name(as_dtype)} tolerances: your checker says "
                    f"{_verdict(got)}, the reference checker says {_verdict(exp)}. What is wrong with this run: "
                    f"{wrong}.")


def _verdict(v: Any) -> str:
    if v is None:
        return "equivalent"
    if type(v) is tuple and len(v) == 2:
        return f"diverges at step {v[0]} in {sorted({key_family(k) for k in v[1]})}"
    return repr(v)[:80]


# --------------------------------------------------------------------------- design exercise 6: a sharded layout


def sharded_ratios(reference: State, shards: Sequence[State], layout: eq.Layout,
                   tolerances: dict[str, float]) -> dict[str, float]:
    """Per key of ``reference``, the worst :func:`tolerance_ratio` of what the shards hold of it (``inf``: missing).

    A :data:`helpers.l09_equivalence_tests.FLAT` key is its elements gathered from the ranks' flat shards
    (:func:`helpers.l09_equivalence_tests.shard_update_state`; the padding belongs to no tensor); a
    :data:`helpers.l09_equivalence_tests.REPLICATED` key is every rank's copy; ``step/<name>`` is the
    ``"step"`` of every rank holding an element of ``name``. A key passes exactly when its ratio is
    at most 1.
    """
    size, holders = eq.shard_size(layout, len(shards)), eq.holders_of(layout, len(shards))
    ratios = {key: max(tolerance_ratio(key, reference[key], shard.get(key), tolerances) for shard in shards)
              for key in eq.REPLICATED}
    for family in eq.FLAT:
        pieces = [shard.get(family) for shard in shards]
        whole = all(isinstance(p, torch.Tensor) and p.shape == (size,) for p in pieces)
        flat = torch.cat(pieces) if whole else None
        start = 0
        for name, shape in layout:
            count = torch.Size(shape).numel()
            tensor = None if flat is None else flat[start:start + count].view(shape)
            ratios[f"{family}/{name}"] = tolerance_ratio(f"{family}/{name}", reference[f"{family}/{name}"], tensor,
                                                         tolerances)
            start += count
    for name, _ in layout:
        key = f"step/{name}"
        ratios[key] = max((tolerance_ratio(key, reference[key], shards[r].get("step"), tolerances)
                           for r in holders[name]), default=0.0)
    return ratios


def compare_sharded(reference: State, shards: Sequence[State], layout: eq.Layout,
                    tolerances: dict[str, float]) -> list[str]:
    """Reference of design exercise 6: sorted keys of ``reference`` that the sharded state does not match."""
    return sorted(key for key, ratio in sharded_ratios(reference, shards, layout, tolerances).items()
                  if not ratio <= 1)


ShardedCase = tuple[str, State, list[State], eq.Layout, dict[str, float]]


def _layout(state: State, order: Sequence[int]) -> eq.Layout:
    """The parameters of ``state`` (``param/`` keys in insertion order), flattened in ``order`` (indices)."""
    names = [key.split("/", 1)[1] for key in state if key_family(key) == "param"]
    return [(names[i], list(state[f"param/{names[i]}"].shape)) for i in order]


def _edited(shards: list[State], rank: int, key: str, change: Callable[[torch.Tensor], torch.Tensor]) -> list[State]:
    """Copies of ``shards`` with ``change`` applied to rank ``rank``'s ``key``."""
    out = [{k: v.clone() for k, v in shard.items()} for shard in shards]
    out[rank][key] = change(out[rank][key])
    return out


def _outlier_in_smallest_piece(reference: State, shards: list[State], layout: eq.Layout,
                               tolerances: dict[str, float]) -> list[State]:
    """For every parameter split across ranks, its element in its smallest-norm piece moves by 0.4 of the key's
    tolerance times the whole tensor's 2-norm: each tensor passes, that piece alone is far off."""
    size, holders, out = eq.shard_size(layout, len(shards)), eq.holders_of(layout, len(shards)), shards
    start = 0
    for name, shape in layout:
        count, key = torch.Size(shape).numel(), f"param/{name}"
        if len(holders[name]) > 1:
            cuts = [(max(start, r * size), min(start + count, (r + 1) * size)) for r in holders[name]]
            flat = torch.cat([s["param"] for s in shards])
            lo, _ = min(cuts, key=lambda c: (flat[c[0]:c[1]].norm().item(), c))
            shift = 0.4 * tolerances[key] * reference[key].norm()
            out = _edited(out, lo // size, "param", lambda v, i=lo % size, d=shift: v.index_add(
                0, torch.tensor([i]), d.reshape(1).to(v.dtype)))
        start += count
    return out


def sharded_cases(reference: State, correct: State, tolerances: dict[str, float], world_size: int,
                  order: Sequence[int]) -> list[ShardedCase]:
    """Design exercise 6's synthetic cases: ``correct`` (a correct run's update state, judged with
    ``tolerances``) sharded over ``world_size`` ranks in the parameter order ``order``, as it is and broken
    in ways only a sharded run can be."""
    layout = _layout(reference, order)
    good = eq.shard_update_state(correct, layout, world_size)
    last = world_size - 1
    nan_first = lambda v: v.index_fill(0, torch.tensor([0]), math.nan)  # noqa: E731
    swapped = [{**good[0], "param": good[1]["param"]}, {**good[1], "param": good[0]["param"]}, *good[2:]]
    cases = [
        ("a correct run", good),
        ("a correct run, the padding holding garbage", eq.shard_update_state(correct, layout, world_size, 1e30)),
        ("the reference, its split tensors each off by 0.4 of their tolerance in their smallest piece",
         _outlier_in_smallest_piece(reference, eq.shard_update_state(reference, layout, world_size), layout,
                                    tolerances)),
        (f"rank {last}'s step counter one too high", _edited(good, last, "step", lambda v: v + 1)),
        ("rank 1 reports its own loss, 1% off, not the global one", _edited(good, 1, "loss", lambda v: v * 1.01)),
        (f"rank {last}'s mask has its first entry flipped", _edited(good, last, "mask", lambda v: v ^ (
            torch.arange(v.numel()) == 0))),
        ("rank 1's second moments went through bfloat16", _edited(good, 1, "exp_avg_sq",
                                                                  lambda v: v.bfloat16().double())),
        ("ranks 0 and 1 hold each other's parameter shard", swapped),
        (f"a NaN in rank {last}'s gradient shard", _edited(good, last, "grad", nan_first)),
        ("rank 0's first moments missing", _edited(good, 0, "exp_avg", lambda v: v[:0])),
    ]
    return [(f"{what} ({world_size} ranks, flattened as {[name for name, _ in layout]})", reference, shards, layout,
             tolerances) for what, shards in cases]


def other_model(seed: int) -> tuple[State, State, dict[str, float]]:
    """``(reference, a correct run's state, tolerances)`` of a model the notebook never shows (other names and
    sizes, 45 elements): random float64 values, the correct run off by about a tenth of each key's tolerance."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"embed.weight": (7, 3), "embed.bias": (7,), "head.weight": (2, 7), "head.bias": (2,), "gain": (1,)}
    reference: State = {"loss": torch.rand((), generator=g, dtype=torch.float64) + 0.5,
                        "clip_coef": torch.tensor(0.8, dtype=torch.float64), "mask": torch.rand(10, generator=g) > 0.3}
    for family in eq.FLAT:
        for name, shape in shapes.items():
            value = torch.randn(shape, generator=g, dtype=torch.float64)
            reference[f"{family}/{name}"] = value * value if family == "exp_avg_sq" else value
    reference |= {f"step/{name}": torch.tensor(1000.0 + seed, dtype=torch.float64) for name in shapes}
    tolerances = {k: 1e-3 * (1 + i % 3) for i, (k, v) in enumerate(reference.items()) if not exact(k, v)}
    correct = {k: v * (1 + 0.1 * tolerances[k] * torch.randn(v.shape, generator=g, dtype=v.dtype)) if k in tolerances
               else v.clone() for k, v in reference.items()}
    return reference, correct, tolerances


def _near(reference: State, shards: Sequence[State], layout: eq.Layout, tolerances: dict[str, float]) -> set[str]:
    """Keys whose ratio lies within :data:`MARGIN` of 1: another CPU may put them on the other side."""
    return {k for k, ratio in sharded_ratios(reference, shards, layout, tolerances).items()
            if 1 / MARGIN <= ratio <= MARGIN}


def zoo_sharded_cases(reference_steps: Sequence[State], tolerances: dict[torch.dtype, dict[str, float]],
                      runs: dict[str, tuple[torch.dtype, list[State]]], world_size: int,
                      order: Sequence[int]) -> list[ShardedCase]:
    """Every step of every zoo run, sharded over ``world_size`` ranks in the parameter order ``order``,
    judged with its precision's tolerances."""
    layout = _layout(reference_steps[0], order)
    return [(f"zoo run '{name}' at step {step} ({world_size} ranks, flattened as {[n for n, _ in layout]})", ref,
             eq.shard_update_state(state, layout, world_size), layout, tolerances[dtype])
            for name, (dtype, states) in runs.items() for step, (ref, state) in enumerate(zip(reference_steps, states))]


def check_sharded(fn: Callable[..., Any], cases: Sequence[ShardedCase]) -> None:
    """``fn`` returns the sorted differing keys the reference does, on every case; a key within :data:`MARGIN`
    of its tolerance may be reported or not."""
    for description, reference, shards, layout, tolerances in cases:
        exp = compare_sharded(reference, shards, layout, tolerances)
        near = _near(reference, shards, layout, tolerances)
        got = plain(fn(_copies([reference])[0], _copies(shards), [(n, list(s)) for n, s in layout], dict(tolerances)),
                    "compare_sharded's result")
        sure = set(exp) - near
        if type(got) is not list or got != sorted(set(got)) or not sure <= set(got) <= set(exp) | near:
            raise AssertionError(
                f"case '{description}': compare_sharded returned {_short(got)}, expected {_short(exp)}"
                f"{f' (these may go either way: {sorted(near)})' if near else ''}.{_sharded_hint(got, exp, near)}")


def _sharded_hint(got: Any, exp: list[str], near: set[str]) -> str:
    if type(got) is not list or got != sorted(set(got)):
        return " Return a sorted list of the reference's keys, each once."
    missed, extra = {key_family(k) for k in set(exp) - set(got) - near}, set(got) - set(exp) - near
    if not exp and extra:
        return (" This run is correct: a false alarm. A tensor's tolerance is relative to the whole tensor's 2-norm, "
                "wherever its elements lie; the padding after the last parameter belongs to no tensor.")
    if "step" in missed:
        return " Every rank's counter is the counter of each parameter it holds an element of."
    if missed & set(eq.REPLICATED):
        return " Every rank holds its own copy of the loss, the clip coefficient and the mask: each must match."
    if missed:
        return (f" Keys of families {sorted(missed)} were not flagged: gather each tensor's elements in the layout's "
                f"order (not the reference's) and compare it at its own tolerance; NaN must not pass.")
    return " Extra keys were flagged: name only the tensors (and counters) whose elements differ."


# --------------------------------------------------------------------------- measurements


def relative_error(reference: torch.Tensor, candidate: torch.Tensor | None) -> float:
    """``||c - r||_2 / ||r||_2`` in float64 (bools count as 0/1); ``inf`` for a missing or misshapen candidate.

    A zero reference gives 0 when the candidate is zero too, else ``inf``.
    """
    if candidate is None or reference.shape != candidate.shape:
        return math.inf
    r, c = reference.double(), candidate.double()
    diff, scale = (c - r).norm().item(), r.norm().item()
    if scale == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return diff / scale


def tolerance_ratio(key: str, reference: torch.Tensor, candidate: torch.Tensor | None,
                    tolerances: dict[str, float]) -> float:
    """``||c - r||_2 / (tolerances[key] * ||r||_2 + 1e-12)``: at most 1 exactly when the key passes.

    Exact keys (``step/*``, bool) use a tolerance of 0 (a counter off by one gives ``1e12``);
    equal bools give 0, different ones ``inf``, and so does a missing or misshapen candidate.
    """
    if candidate is None or reference.shape != candidate.shape:
        return math.inf
    if reference.dtype == torch.bool:
        return 0.0 if torch.equal(reference, candidate.bool()) else math.inf
    rtol = 0.0 if exact(key, reference) else tolerances[key]
    r, c = reference.double(), candidate.double()
    return (c - r).norm().item() / (rtol * r.norm().item() + ABS_SLACK)
