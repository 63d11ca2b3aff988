"""Your own notebook code under a real launcher: ``torchrun``, on gloo (CPU) or NCCL (GPUs).

    python -m helpers.launch release/01_replicated_training/01_replicated_training.ipynb --nproc-per-node 2

takes the solution cells of your notebook (and its import cell), writes them to a module, and
runs the lesson's training script ``helpers/lNN_slug/launch.py`` with them under
``torchrun --standalone``: one process per rank, the rank and world size from the environment,
as at scale. The script trains a small model with your functions, compares the result with a
reference (single-process float64 training, or PyTorch's own DDP / ZeroRedundancyOptimizer),
and prints whether it is equal, the collectives each rank issued and the bytes it held. The
command exits 0 if every rank's result is equal to the reference, 1 if not, 2 if the run failed
(a rank raised, hung, or a function is missing); a failing rank is reported with the frame of
your code that failed. ``--backend nccl`` (the default where CUDA is available) puts each rank on
``cuda:LOCAL_RANK``. Several machines: see the README's section "Run your code under torchrun".

This module holds what the command checks before it starts torchrun (no torch import: it is
quick); :mod:`helpers.launch.worker` is the side every lesson script shares, and the command is
:mod:`helpers.launch.__main__`.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Sequence

VERDICT_FILE = "verdict.json"
MISSING = 3  # a worker's exit status when the student's module lacks a function: the command reports it


class MissingCode(Exception):
    """The notebook does not define (or has not yet implemented) a function the script needs."""


def stubs(source: str) -> set[str]:
    """Names of the functions and classes in ``source`` whose body (or a method's) only raises
    NotImplementedError: the release notebook's unsolved cells."""
    found = set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            continue
        bodies = [node] if isinstance(node, ast.FunctionDef) else [
            n for n in node.body if isinstance(n, ast.FunctionDef)]
        for fn in bodies:
            body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]):
                found.add(node.name)
    return found


def defined_names(source: str) -> set[str]:
    """Names bound at the top level of ``source``: its functions, classes and assignments."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def check_source(source: str, needs: Sequence[str]) -> None:
    """Raise :class:`MissingCode` naming what ``source`` lacks of ``needs``, or has not implemented yet."""
    missing = [name for name in needs if name not in defined_names(source)]
    if missing:
        raise MissingCode(f"your notebook defines no {', '.join(missing)}: this lesson's script needs "
                          f"{', '.join(needs)} from your solution cells")
    unsolved = [name for name in needs if name in stubs(source)]
    if unsolved:
        raise MissingCode(f"not implemented yet: {', '.join(unsolved)} (its solution cell still raises "
                          f"NotImplementedError); this lesson's script needs {', '.join(needs)}")


def script_constant(script: Path, name: str, default: object = None) -> object:
    """A lesson script's top-level constant ``name`` (e.g. ``NEEDS``, the student's names it calls), read
    without importing the script."""
    for node in ast.parse(script.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return default
