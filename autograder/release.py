"""Generate ``release/`` from ``source/`` with nbgrader, or prove it is in sync."""
from __future__ import annotations

import filecmp
import shutil
import tempfile
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from .course import (RELEASE, SOURCE, CourseError, check_api_result, course_root, make_api,
                     resolve_assignments)


def generate_release(assignment: str, root: Path, scratch: Path) -> Path:
    """Generate the student version of ``assignment`` in the scratch course ``scratch``.

    The source is copied into a fresh course directory, so generating never touches the
    course's own gradebook. Returns the generated ``release/<assignment>`` directory.
    """
    shutil.copytree(root / SOURCE / assignment, scratch / SOURCE / assignment,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc"))
    api = make_api(scratch)
    check_api_result(api.generate_assignment(assignment, force=True, create=True),
                     f"generate_assignment {assignment}")
    return scratch / RELEASE / assignment


def comparable(nb: NotebookNode) -> dict:
    """The parts of a release notebook that must match: every cell's type, source,
    metadata and (absent) outputs, and the notebook's kernelspec and language."""
    return {
        "cells": [(c.cell_type, c.source, c.metadata, c.get("outputs"), c.get("execution_count"))
                  for c in nb.cells],
        "metadata": {k: nb.metadata.get(k) for k in ("kernelspec", "language_info")},
    }


def differences(generated: Path, committed: Path) -> list[str]:
    """Files that differ between two release directories (relative paths, sorted)."""
    if not committed.is_dir():
        return [f"release/{committed.name} is missing"]
    files = {p.relative_to(generated) for p in generated.rglob("*") if p.is_file()}
    files |= {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
    changed = []
    for rel in sorted(files):
        new, old = generated / rel, committed / rel
        if not (new.is_file() and old.is_file()):
            changed.append(f"{rel} ({'missing' if new.is_file() else 'extra'})")
        elif rel.suffix == ".ipynb":
            if comparable(nbformat.read(new, as_version=4)) != comparable(nbformat.read(old, as_version=4)):
                changed.append(str(rel))
        elif not filecmp.cmp(new, old, shallow=False):
            changed.append(str(rel))
    return changed


def release(assignments: list[str], root: Path | str | None = None, check: bool = False) -> list[str]:
    """Regenerate ``release/`` for ``assignments`` (all when empty).

    With ``check``, nothing is written: returns the out-of-date assignments, each as
    ``"<assignment>: <files>"`` (empty when in sync). Without it, replaces each
    ``release/<assignment>`` by the freshly generated one and returns an empty list.
    """
    root = course_root(root)
    names = resolve_assignments(assignments, root)
    if not names:
        raise CourseError(f"no assignments under {root / SOURCE}")
    stale = []
    for name in names:
        with tempfile.TemporaryDirectory(prefix="autograder-release-") as tmp:
            generated = generate_release(name, root, Path(tmp))
            committed = root / RELEASE / name
            if check:
                changed = differences(generated, committed)
                if changed:
                    stale.append(f"{name}: {', '.join(changed)}")
            else:
                shutil.rmtree(committed, ignore_errors=True)
                shutil.copytree(generated, committed)
    return stale
