"""Write, or check, the results stored with the course for chapters (``helpers/stored``).

Every lesson's grader module (``autograder.lessons.lNN``, read from :data:`helpers.lessons.LESSONS`)
may define ``STORED``, a dict from a stored name to a zero-argument producer returning JSON data.
``store`` writes them; ``store --check`` recomputes them and reports files that differ, are
missing, or are not produced by anyone.

A stored number that is a rounding error (float32 drift, a ratio of it to a tolerance) is
not the same on every CPU (SIMD level, MKL's paths, thread count), so it is not a fact to
compare bit for bit. A module declares such results in ``STORED_ROUNDING``: name ->
:class:`Rounding`, saying within what factor its floats must agree, which paths hold
CPU-dependent values (not compared) and which text (a hash of float32 parameters) is masked.
Everything else must be equal.
"""
from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

from helpers.lessons import LESSONS
from helpers.shared.stored import STORED_DIR, path_of



@dataclass(frozen=True)
class Rounding:
    """How a stored result that holds rounding errors is compared with a recomputed one.

    ``factor``: two floats agree when both are 0 or they have one sign and differ by at most
    this factor (rounding errors vary in size, not in order of magnitude, between CPUs);
    ``cpu_dependent``: regular expressions of paths (``/key/key[index]``) not compared;
    ``masked``: a regular expression replaced in strings before they are compared;
    ``one_step``: regular expressions of paths whose integers (indices into a grid of
    factors chosen from rounding errors) may differ by one;
    ``rel_tol``, ``abs_tol``: two floats that are *results* computed in float32 (parameters after a
    few steps, losses) agree when ``|a - b| <= rel_tol * max(|a|, |b|) + abs_tol``: other SIMD paths
    round each operation differently, which moves such values in their 7th or 8th digit.
    """

    factor: float = 1.0
    cpu_dependent: tuple[str, ...] = ()
    masked: str | None = None
    one_step: tuple[str, ...] = ()
    rel_tol: float = 0.0
    abs_tol: float = 0.0


# float32 results after a few steps of training: another SIMD level moves them by a few 1e-7
# relative, and small entries of a tensor by a few 1e-8 absolute (errors scale with the
# tensor's largest values); these bounds leave room for other CPUs and still flag a change
# of the code, which moves such values by far more.
FLOAT32_RESULTS = Rounding(rel_tol=1e-5, abs_tol=1e-6)


# The environment that makes torch and MKL on this CPU round as a CPU without AVX would (portable
# kernels, MKL's compatible paths, one thread): how ``make test`` checks stored results for other CPUs.
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}


def agree(stored: Any, fresh: Any, rounding: Rounding, path: str = "") -> str | None:
    """The first path where ``fresh`` differs from ``stored`` beyond ``rounding``; None if they agree."""
    if any(re.fullmatch(pattern, path) for pattern in rounding.cpu_dependent):
        return None
    if isinstance(stored, dict) and isinstance(fresh, dict):
        if stored.keys() != fresh.keys():
            return f"{path}: keys {sorted(stored)} != {sorted(fresh)}"
        return next((d for k in stored if (d := agree(stored[k], fresh[k], rounding, f"{path}/{k}"))), None)
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return f"{path}: {len(stored)} items != {len(fresh)}"
        return next((d for i, (a, b) in enumerate(zip(stored, fresh))
                     if (d := agree(a, b, rounding, f"{path}[{i}]"))), None)
    if type(stored) is float and type(fresh) is float and (rounding.rel_tol or rounding.abs_tol):
        same = abs(stored - fresh) <= rounding.rel_tol * max(abs(stored), abs(fresh)) + rounding.abs_tol
        return None if same else (f"{path}: {stored!r} != {fresh!r} "
                                  f"(beyond rel_tol {rounding.rel_tol:g}, abs_tol {rounding.abs_tol:g})")
    if type(stored) is float and type(fresh) is float and rounding.factor > 1:
        same = stored == fresh or (stored * fresh > 0 and max(abs(stored), abs(fresh))
                                   <= rounding.factor * min(abs(stored), abs(fresh)))
        return None if same else f"{path}: {stored!r} != {fresh!r} (beyond a factor {rounding.factor:g})"
    if type(stored) is int and type(fresh) is int and any(re.fullmatch(p, path) for p in rounding.one_step):
        return None if abs(stored - fresh) <= 1 else f"{path}: {stored} != {fresh} (beyond one step)"
    if type(stored) is str and type(fresh) is str and rounding.masked:
        stored, fresh = (re.sub(rounding.masked, "#", s) for s in (stored, fresh))
    return None if (type(stored), stored) == (type(fresh), fresh) else f"{path}: {stored!r:.60} != {fresh!r:.60}"


def roundings() -> dict[str, Rounding]:
    """Every stored name a lesson module declares in ``STORED_ROUNDING``."""
    found: dict[str, Rounding] = {}
    for item in LESSONS:
        found.update(getattr(importlib.import_module(item.grader), "STORED_ROUNDING", {}))
    return found


def producers() -> dict[str, Callable[[], Any]]:
    """Every stored name and its producer, from all lesson modules."""
    found: dict[str, Callable[[], Any]] = {}
    for item in LESSONS:
        module = importlib.import_module(item.grader)
        for name, producer in getattr(module, "STORED", {}).items():
            if name in found:
                raise ValueError(f"stored result {name!r} is produced twice (again in {module.__name__})")
            found[name] = producer
    return found


def encode(data: Any) -> str:
    """The file text of a stored result: sorted keys, stable float formatting."""
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def store(check: bool = False) -> list[str]:
    """Write every stored result that is missing or disagrees with a fresh one beyond its rounding; with
    ``check`` write nothing and return the stale names."""
    stale = []
    wanted, rounding = producers(), roundings()
    for name, producer in sorted(wanted.items()):
        text = encode(producer())
        path = path_of(name)
        if check:
            if not path.is_file():
                stale.append(f"{name} (missing)")
            elif path.read_text(encoding="utf-8") != text:
                where = agree(json.loads(path.read_text(encoding="utf-8")), json.loads(text),
                              rounding.get(name, Rounding()))
                if where:
                    stale.append(f"{name} (differs at {where})")
        elif not path.is_file() or agree(json.loads(path.read_text(encoding="utf-8")), json.loads(text),
                                         rounding.get(name, Rounding())):
            # a result that agrees within its rounding is kept: another CPU's last digits are not a change
            STORED_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in sorted(STORED_DIR.glob("*.json")):
        if path.stem not in wanted:
            stale.append(f"{path.stem} (no producer: delete it)")
    return stale
