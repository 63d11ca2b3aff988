"""Write, or check, the results stored with the course for chapters (``helpers/stored``).

Every ``autograder.lessons.lNN`` module may define ``STORED``, a dict from a stored name to
a zero-argument producer returning JSON data. ``store`` writes them; ``store --check``
recomputes them and reports files that differ, are missing, or are not produced by anyone.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any, Callable

from helpers.stored import STORED_DIR, path_of

from . import lessons


def producers() -> dict[str, Callable[[], Any]]:
    """Every stored name and its producer, from all lesson modules."""
    found: dict[str, Callable[[], Any]] = {}
    for info in sorted(pkgutil.iter_modules(lessons.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{lessons.__name__}.{info.name}")
        for name, producer in getattr(module, "STORED", {}).items():
            if name in found:
                raise ValueError(f"stored result {name!r} is produced twice (again in {module.__name__})")
            found[name] = producer
    return found


def encode(data: Any) -> str:
    """The file text of a stored result: sorted keys, stable float formatting."""
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def store(check: bool = False) -> list[str]:
    """Write every stored result; with ``check`` write nothing and return the stale names."""
    stale = []
    wanted = producers()
    for name, producer in sorted(wanted.items()):
        text = encode(producer())
        path = path_of(name)
        if check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(f"{name} ({'missing' if not path.is_file() else 'differs'})")
        else:
            STORED_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in sorted(STORED_DIR.glob("*.json")):
        if path.stem not in wanted:
            stale.append(f"{path.stem} (no producer: delete it)")
    return stale
