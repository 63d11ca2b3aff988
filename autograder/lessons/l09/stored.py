"""Lesson 09, equivalence tests: the producers of the chapter's stored results (``STORED``, ``STORED_ROUNDING``).

The zoo's errors, tolerance ratios and verdicts (:func:`stored_zoo`, :func:`stored_zoo_verdicts`), the verdicts of
the checkers the chapter compares (:data:`CHECKERS`) under this CPU's kernels and another's, Adam's scale
invariance and the float32 drift per learning rate; each measured against the references of :mod:`.verdicts`.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from autograder.store import OTHER_CPU, Rounding
from helpers import l09_equivalence_tests as eq
from helpers.l09_equivalence_tests import FAMILIES, dtype_name, key_family, ordered_keys

from .verdicts import (
    ABS_SLACK, FLOOR, MARGIN, PRECISIONS, SAFETY, State, compare_update_states, exact, first_divergence,
    measured_zoo, relative_error, tolerance_ratio, update_state)

FACTORS = tuple(2.0 ** k for k in range(-2, 11))  # the chapter explorer's slider: 1/4 .. 1024 times the error
OLD_ULPS = 64  # the course's former budget, 64 epsilons of the run's dtype (0.5 relative in bfloat16)
# The kernels of another CPU, simulated on this one: no SIMD beyond the compiler's default, MKL's portable
# code path, one thread. The chapter's checker verdicts are stored under this CPU's kernels and under these.
PORTABLE_KERNELS = OTHER_CPU  # another CPU, simulated (autograder.store)


# --------------------------------------------------------------------------- measurements for the chapter


def resolved_error(key: str, reference: torch.Tensor, candidate: torch.Tensor | None) -> float:
    """:func:`relative_error`, but at least :data:`FLOOR` for a key compared with a tolerance.

    Below float32's epsilon a run with float32 weights cannot be resolved: which error it then
    shows (3e-9 or 5e-8 for one clip coefficient) is the luck of the CPU's SIMD path, so the
    stored value says only "at most one epsilon". Exact keys (``step/*``, bool) keep their error.
    """
    error = relative_error(reference, candidate)
    return error if exact(key, reference) or not math.isfinite(error) else max(error, FLOOR)


def resolved_ratio(key: str, reference: torch.Tensor, candidate: torch.Tensor | None,
                   tolerances: dict[str, float]) -> float:
    """:func:`tolerance_ratio` with the error floored as in :func:`resolved_error` (at most 1 exactly when
    the key passes: the floor alone gives at most 1/SAFETY)."""
    ratio = tolerance_ratio(key, reference, candidate, tolerances)
    if exact(key, reference) or not math.isfinite(ratio):
        return ratio
    scale = reference.double().norm().item()
    return max(ratio, FLOOR * scale / (tolerances[key] * scale + ABS_SLACK))


def _scaled(tolerances: dict[str, float], factor: float) -> dict[str, float]:
    """The tolerances with ``factor`` in place of :data:`SAFETY`."""
    return {k: v * factor / SAFETY for k, v in tolerances.items()}


def _ulps(keys: Sequence[str], dtype: torch.dtype, ulps: float = OLD_ULPS) -> dict[str, float]:
    """A fixed tolerance, ``ulps`` epsilons of ``dtype``, for every key (the course's former checker)."""
    return {k: ulps * torch.finfo(dtype).eps for k in keys}


def _elementwise_fails(reference: State, candidate: State, tolerances: dict[str, float]) -> list[str]:
    """Keys failing an elementwise ``|c_i - r_i| <= tol |r_i| + 1e-12`` at the calibrated tolerances
    (a wrong checker)."""
    bad = []
    for key, ref in reference.items():
        cand = candidate.get(key)
        if cand is None or cand.shape != ref.shape:
            bad.append(key)
            continue
        r, c = ref.double(), cand.double()
        tol = 0.0 if exact(key, ref) else tolerances[key]
        if bool(((c - r).abs() > tol * r.abs() + ABS_SLACK).any()):
            bad.append(key)
    return sorted(bad)


def _without(families: tuple[str, ...], keys: list[str]) -> list[str]:
    return [k for k in keys if key_family(k) not in families]


Checker = Callable[[State, State, torch.dtype, dict[str, float]], list[str]]
CHECKERS: dict[str, tuple[str, Checker]] = {
    "loss only": ("compares the loss, at its calibrated tolerance",
                  lambda r, c, d, t: [k for k in compare_update_states(r, c, t) if k == "loss"]),
    "fixed fp32 tolerance": ("every key, 64 eps of float32 for every run",
                             lambda r, c, d, t: compare_update_states(r, c, _ulps(r, torch.float32))),
    "64 eps of the run's dtype": ("every key, 64 eps of the run's dtype (0.5 in bfloat16)",
                                  lambda r, c, d, t: compare_update_states(r, c, _ulps(r, d))),
    "no safety factor": ("every key, at 1 (not 4) times the calibration run's error",
                         lambda r, c, d, t: compare_update_states(r, c, _scaled(t, 1.0))),
    "no moments, no step": ("every key but exp_avg, exp_avg_sq and step, calibrated",
                            lambda r, c, d, t: _without(("exp_avg", "exp_avg_sq", "step"),
                                                        compare_update_states(r, c, t))),
    "elementwise rtol": ("every key, |c_i - r_i| <= tol |r_i| per element, calibrated",
                         lambda r, c, d, t: _elementwise_fails(r, c, t)),
    "update state (reference)": ("the course's checker: every key, 2-norm, calibrated per key",
                                 lambda r, c, d, t: compare_update_states(r, c, t)),
}
"""Checkers the chapter compares: ``{name: (what it compares, differing keys of (reference, candidate, run's
dtype, calibrated tolerances of that precision))}``."""


def _first_failing_step(reference_steps: Sequence[State], states: Sequence[State], dtype: torch.dtype,
                        tolerances: dict[str, float], fails: Checker) -> int | None:
    return next((s for s, (r, c) in enumerate(zip(reference_steps, states)) if fails(r, c, dtype, tolerances)), None)


def _passes_from(ratio: float) -> int | None:
    """Index into :data:`FACTORS` of the smallest factor at which a key of tolerance ratio ``ratio`` (at
    :data:`SAFETY`) passes: ``ratio * SAFETY / factor <= 1`` (``None``: none does)."""
    return next((index for index, factor in enumerate(FACTORS) if ratio * SAFETY <= factor), None)


def _sig(value: float, digits: int = 3) -> float | None:
    """``value`` rounded to ``digits`` significant digits (stable in JSON); ``None`` for infinity."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None


def stored_zoo() -> dict[str, Any]:
    """``09_zoo``: the calibration, and per zoo run and step each key's error, tolerance ratio and verdict.

    ``names`` lists the runs in zoo order (JSON objects are stored with sorted keys), ``keys``
    orders every per-key list; ``tolerances[precision]`` are the calibrated tolerances (safety
    ``safety``); per run, ``errors`` are relative 2-norm errors (:func:`resolved_error`: at least
    ``floor``, float32's epsilon, for keys compared with a tolerance; ``None``: infinite), ``ratios``
    tolerance ratios at the run's precision (:func:`resolved_ratio`), ``failing`` the keys the
    course's checker rejects on this CPU, and ``passes_from[precision]`` the index into ``factors``
    of the smallest safety factor at which each key passes with that precision's calibration
    (``None``: none).
    """
    reference, tolerances, runs = measured_zoo()
    keys = ordered_keys(reference[0])
    precisions = [dtype_name(d) for d in PRECISIONS]
    out: dict[str, Any] = {"names": list(runs), "keys": keys,
                           "families": [f for f in FAMILIES if any(key_family(k) == f for k in keys)],
                           "safety": SAFETY, "floor": FLOOR, "margin": MARGIN, "factors": list(FACTORS),
                           "precisions": precisions,
                           "tolerances": {dtype_name(d): {k: _sig(t[k], 6) for k in keys if k in t}
                                          for d, t in tolerances.items()},
                           "old_tolerance": {dtype_name(d): OLD_ULPS * torch.finfo(d).eps for d in PRECISIONS},
                           "runs": {}}
    for name, (dtype, states) in runs.items():
        pairs = list(zip(reference, states))
        out["runs"][name] = {
            "dtype": dtype_name(dtype), "bug": eq.ZOO[name].bug,
            "errors": [[_sig(resolved_error(k, r[k], c.get(k))) for k in keys] for r, c in pairs],
            "ratios": [[_sig(resolved_ratio(k, r[k], c.get(k), tolerances[dtype])) for k in keys] for r, c in pairs],
            "failing": [compare_update_states(r, c, tolerances[dtype]) for r, c in pairs],
            "passes_from": {dtype_name(d): [[_passes_from(resolved_ratio(k, r[k], c.get(k), t)) for k in keys]
                                            for r, c in pairs]
                            for d, t in tolerances.items()},
        }
    return out


def verdict_with_margin(reference_steps: Sequence[State], candidate_steps: Sequence[State],
                        tolerances: dict[str, float]) -> dict[str, Any] | None:
    """:func:`first_divergence` as JSON, ``None`` or ``{"step", "keys", "near"}``; ``near`` are the keys of
    that step whose tolerance ratio lies within :data:`MARGIN` of 1 (failing or not): on another CPU they
    may change sides, the step and the other keys do not."""
    verdict = first_divergence(reference_steps, candidate_steps, tolerances)
    if verdict is None:
        return None
    step, keys = verdict
    ref, cand = reference_steps[step], candidate_steps[step]
    near = [k for k in ordered_keys(ref) if not exact(k, ref[k])
            and 1 / MARGIN <= tolerance_ratio(k, ref[k], cand.get(k), tolerances) <= MARGIN]
    return {"step": step, "keys": keys, "near": near}


def stored_zoo_verdicts() -> dict[str, Any]:
    """``09_zoo_verdicts``: the course checker's verdict on every zoo run (:func:`verdict_with_margin`), with the
    tolerances calibrated at float32 and at bfloat16.

    ``{"names": runs in zoo order, "margin": MARGIN, "runs": {run: {"dtype": its precision, "bug": what is
    wrong or None, "as": {precision: {"step", "keys", "near"} or None}}}}``.
    """
    reference, tolerances, runs = measured_zoo()
    return {"names": list(runs), "margin": MARGIN,
            "runs": {name: {"dtype": dtype_name(dtype), "bug": eq.ZOO[name].bug,
                            "as": {dtype_name(d): verdict_with_margin(reference, states, t)
                                   for d, t in tolerances.items()}}
                     for name, (dtype, states) in runs.items()}}


# Verdicts of a calibrated checker decided by a key within MARGIN of its tolerance (at 1 x the calibration, a
# correct run's worst key uses 1.1 to 1.4 times it; the loss of the float32 local-clipping run at step 1 exceeds
# its tolerance only 1.7 to 1.8 times; the parameters of the float32 moments bug reach 0.74 of theirs at step 2):
# {checker: runs}. tests/test_l09_equivalence_tests.py shows that these verdicts, and no others, change when the
# tolerances are scaled by MARGIN or 1 / MARGIN.
NEAR_TOLERANCE = {"no safety factor": tuple(n for n, m in eq.ZOO.items() if m.bug is None),
                  "loss only": ("clip_local_norm",), "no moments, no step": ("moments_resumed_in_bf16",)}


def checker_verdicts(scale: float = 1.0) -> dict[str, dict[str, int | None]]:
    """``{checker: {run: first step it rejects or None}}`` for :data:`CHECKERS` on the zoo, with the calibrated
    tolerances multiplied by ``scale``."""
    reference, tolerances, runs = measured_zoo()
    return {checker: {name: _first_failing_step(reference, states, dtype, _scaled(tolerances[dtype], SAFETY * scale),
                                                fails)
                      for name, (dtype, states) in runs.items()}
            for checker, (_, fails) in CHECKERS.items()}


def _kernels() -> dict[str, Any]:
    """The checkers' verdicts under this process's CPU kernels. Which kernels those are (torch's capability name)
    is not stored: it is a fact of the machine that ran ``store``, not of the course."""
    return {"verdicts": checker_verdicts()}


def _kernels_under(env: dict[str, str]) -> dict[str, Any]:
    """:func:`_kernels` in a fresh Python process with ``env`` added to this one's environment (and no shared
    forkserver, so that its ranks start with ``env`` too)."""
    from helpers.runtime.cluster import SHARED_FORKSERVER_ENV

    code = "import json; from autograder.lessons.l09.stored import _kernels; print(json.dumps(_kernels()))"
    environment = {k: v for k, v in os.environ.items() if k != SHARED_FORKSERVER_ENV} | env
    done = subprocess.run([sys.executable, "-c", code], env=environment, cwd=Path(__file__).resolve().parents[3],
                          capture_output=True, text=True, check=True, timeout=600)
    return json.loads(done.stdout.splitlines()[-1])


def stored_checker_verdicts() -> dict[str, Any]:
    """``09_checker_verdicts``: the first step each checker of :data:`CHECKERS` rejects on each zoo run, under
    this CPU's kernels and under :data:`PORTABLE_KERNELS` (another CPU, simulated).

    ``{"checkers": [[name, what it compares], ...], "names": runs in zoo order, "broken": [runs with a
    bug], "near_tolerance": {checker: runs} (:data:`NEAR_TOLERANCE`), "kernels": [{"env": variables set
    ({} for this CPU's own kernels), "verdicts": {checker: {run: step or None}}}, ...]}``.
    """
    return {"checkers": [[name, what] for name, (what, _) in CHECKERS.items()], "names": list(eq.ZOO),
            "broken": [name for name, member in eq.ZOO.items() if member.bug],
            "near_tolerance": {checker: list(runs) for checker, runs in NEAR_TOLERANCE.items()},
            "kernels": [{"env": {}, **_kernels()}, {"env": PORTABLE_KERNELS, **_kernels_under(PORTABLE_KERNELS)}]}


def stored_adam_scale_invariance(scales: Sequence[float] = (0.5, 2, 4, 8, 16, 64)) -> dict[str, Any]:
    """``09_adam_scale_invariance``: worst relative 2-norm difference per family after 3 float64 steps with
    gradients scaled by ``s``, against ``s = 1``, for a fresh unclipped Adam and the course's resumed, clipped one;
    ``float32_tolerance`` is the tightest tolerance a calibration can give, ``SAFETY * FLOOR``.
    """
    families = ["grad", "exp_avg", "exp_avg_sq", "param", "clip_coef", "loss"]
    setups = [("fresh Adam, no clipping", dict(clipped=False, resume_step=0)),
              ("resumed Adam (step 1000), global-norm clipping", dict(clipped=True))]
    out: dict[str, Any] = {"scales": [float(s) for s in scales], "families": families,
                           "float32_tolerance": SAFETY * FLOOR, "setups": []}
    for title, knobs in setups:
        base = update_state(eq.single_process_run(**knobs)[-1])
        scaled = [update_state(eq.single_process_run(grad_scale=s, **knobs)[-1]) for s in scales]
        worst = {f: [_sig(max(relative_error(base[k], state[k]) for k in base if key_family(k) == f))
                     for state in scaled] for f in families}
        out["setups"].append({"title": title, "difference": worst})
    return out


def stored_lr_drift(steps: int = 20) -> dict[str, Any]:
    """``09_lr_drift``: worst relative 2-norm error, in float32 epsilons, per step of a float32 run against float64.

    ``{"steps": steps, "runs": [{"lr": learning rate, "worst_eps": [per step]}, ...]}``.
    """
    problem = eq.make_problem(steps=steps)
    runs = []
    for lr in (1e-5, 1e-1):
        ref64 = [update_state(s) for s in eq.single_process_run(problem, lr=lr)]
        run32 = [update_state(s) for s in eq.single_process_run(problem, lr=lr, dtype=torch.float32)]
        runs.append({"lr": lr, "worst_eps": [_sig(max(relative_error(r[k], c[k]) for k in r) / FLOOR)
                                             for r, c in zip(ref64, run32)]})
    return {"steps": steps, "runs": runs}


# How store --check compares what these producers return on another CPU. Errors are floored at float32's
# epsilon (resolved_error), so a float32 rounding error varies within a factor 4 between CPUs (up to 2 eps
# against the floor's 1), and so do the ratios and tolerances made of them; passes_from, their place on the
# factor-2 grid, by one notch. Which keys fail at a step and the verdicts of NEAR_TOLERANCE are CPU facts,
# not course facts (the name of this CPU's kernels is not stored at all). Every step a verdict names, and
# everything else, is compared exactly.
_NEAR = "|".join(rf"/verdicts/{re.escape(checker)}/({'|'.join(runs)})" for checker, runs in NEAR_TOLERANCE.items())
STORED_ROUNDING = {
    "09_zoo": Rounding(factor=4.0, cpu_dependent=(r"/runs/\w+/failing.*",),
                       one_step=(r"/runs/\w+/passes_from/\w+\[\d+\]\[\d+\]",)),
    "09_zoo_verdicts": Rounding(cpu_dependent=(r"/runs/\w+/as/\w+/(keys|near)",)),
    "09_lr_drift": Rounding(factor=4.0),
    "09_checker_verdicts": Rounding(cpu_dependent=(rf"/kernels\[\d\]({_NEAR})",)),
}
STORED = {
    "09_zoo": stored_zoo,
    "09_zoo_verdicts": stored_zoo_verdicts,
    "09_checker_verdicts": stored_checker_verdicts,
    "09_adam_scale_invariance": stored_adam_scale_invariance,
    "09_lr_drift": stored_lr_drift,
}
