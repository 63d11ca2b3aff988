"""Results stored with the course, for chapter figures and explorers.

A chapter that needs a number only a graded function computes (a bucket schedule, a
live-memory peak, a memory table) loads it from ``helpers/stored/<name>.json`` instead of
importing the function: the instructor side (``autograder/lessons``) produces the files with
``python -m autograder store`` and CI proves with ``store --check`` that they match what the
references compute. Nothing here computes anything.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STORED_DIR = Path(__file__).resolve().parents[1] / "stored"  # helpers/stored/NN_name.json


def path_of(name: str) -> Path:
    """Where the stored result ``name`` lives."""
    return STORED_DIR / f"{name}.json"


def load(name: str) -> Any:
    """The stored result ``name`` (plain JSON data: dicts, lists, numbers, strings)."""
    path = path_of(name)
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in STORED_DIR.glob("*.json"))) or "none"
        raise FileNotFoundError(f"no stored result {name!r} (known: {known})")
    return json.loads(path.read_text(encoding="utf-8"))
