"""Delegation mutants, generated: solution cells that hand the work to something students can import.

For every name a solution cell defines (a graded function or class), the candidates are the
functions and classes of the student-side ``helpers`` package (public or private) that look
like a finished twin: the same name (ignoring leading underscores and a ``reference_``
prefix), or the same parameter names. The k-th delegation notebook binds every graded name
to its k-th candidate (``from helpers.x import y as name``) and keeps the stub where there is
none; the course check proves each such notebook scores 0.

:func:`leftover_notebook` covers the other names student code could once reach: those the
hidden blocks bind (``ref``, the lesson's module of references). Each graded name becomes a
function that calls ``ref``'s twin; since test cells run in the grader, ``ref`` never exists
in the kernel and the notebook must score 0.
"""
from __future__ import annotations

import ast
import copy
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass

from nbformat import NotebookNode

import helpers

MAX_NOTEBOOKS = 3


@dataclass(frozen=True)
class Candidate:
    """A helpers callable a graded name could be bound to."""

    module: str
    name: str

    def statement(self, as_name: str) -> str:
        return f"from {self.module} import {self.name} as {as_name}"


def _parameters(obj) -> list[str] | None:
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return None
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def helpers_callables() -> dict[Candidate, list[str] | None]:
    """Every function and class defined in the student-side helpers, with its parameter names."""
    found = {}
    for info in pkgutil.walk_packages(helpers.__path__, prefix="helpers."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "") == info.name:
                found[Candidate(info.name, name)] = _parameters(obj)
    return found


def _stem(name: str) -> str:
    return name.lstrip("_").lower().removeprefix("reference_").removeprefix("reference")


def defined_names(source: str) -> dict[str, list[str]]:
    """Top-level functions and classes a solution cell defines, with their parameter names."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names[node.name] = [a.arg for a in node.args.posonlyargs + node.args.args]
        elif isinstance(node, ast.ClassDef):
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            names[node.name] = [a.arg for a in init.args.args] if init else []
    return names


def candidates_for(name: str, params: list[str], pool: dict[Candidate, list[str] | None]) -> list[Candidate]:
    """Helpers callables that could be a twin of ``name(params)``, best first."""
    same_name = [c for c in pool if _stem(c.name) == _stem(name)]
    same_params = [c for c, p in pool.items()
                   if len(params) >= 2 and p is not None and p[: len(params)] == params and c not in same_name]
    return sorted(same_name, key=lambda c: c.name) + sorted(same_params, key=lambda c: (c.module, c.name))


def delegation_notebooks(source: NotebookNode, release: NotebookNode) -> list[tuple[str, NotebookNode]]:
    """Up to :data:`MAX_NOTEBOOKS` notebooks (label, notebook) whose solution cells delegate to helpers."""
    pool = helpers_callables()
    per_cell: dict[str, list[tuple[str, Candidate]]] = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not (meta.get("solution") and cell.cell_type == "code"):
            continue
        options = []
        for name, params in defined_names(cell.source).items():
            options += [(name, c) for c in candidates_for(name, params, pool)]
        if options:
            per_cell[meta["grade_id"]] = options
    notebooks = []
    for k in range(min(MAX_NOTEBOOKS, max((len(v) for v in per_cell.values()), default=0))):
        nb = copy.deepcopy(release)
        used = []
        for cell in nb.cells:
            options = per_cell.get(cell.metadata.get("nbgrader", {}).get("grade_id"), [])
            if len(options) > k:
                name, cand = options[k]
                cell.source = cand.statement(name)
                used.append(f"{name}={cand.module}.{cand.name}")
        notebooks.append((", ".join(used), nb))
    return notebooks


def hidden_modules(source: NotebookNode) -> dict[str, str]:
    """Alias -> module of every ``from autograder... import x as alias`` in the source's test cells."""
    found = {}
    for cell in source.cells:
        for module, name, alias in re.findall(r"from (autograder[\w.]*) import (\w+)(?: as (\w+))?", cell.source):
            found[alias or name] = f"{module}.{name}"
    return found


def leftover_notebook(source: NotebookNode, release: NotebookNode) -> tuple[str, NotebookNode] | None:
    """(label, notebook): the release with each graded name calling its twin in the hidden blocks' ``ref``."""
    modules = hidden_modules(source)
    if not modules:
        return None
    alias, module_name = next(iter(modules.items()))
    pool = {Candidate(module_name, n): _parameters(obj) for n, obj in vars(importlib.import_module(module_name)).items()
            if inspect.isfunction(obj) or inspect.isclass(obj)}
    nb = copy.deepcopy(release)
    used = []
    for cell, original in zip(nb.cells, source.cells):
        if not (cell.metadata.get("nbgrader", {}).get("solution") and cell.cell_type == "code"):
            continue
        lines = []
        for name, params in defined_names(original.source).items():
            twins = candidates_for(name, params, pool)
            target = twins[0].name if twins else name
            lines.append(f"def {name}(*args, **kwargs):\n    return {alias}.{target}(*args, **kwargs)\n")
            used.append(f"{name}={alias}.{target}")
        if lines:
            cell.source = "\n\n".join(lines)
    return ", ".join(used), nb
