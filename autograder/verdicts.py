"""Test cells decided in the grader's process, never in the student's kernel.

A graded test cell (visible and hidden tests) runs here, in a namespace that holds what the
notebook's locked import cell imports. Every other name it uses is looked up in the kernel
once per cell: a function or class the student defined becomes a :class:`helpers.runtime.remote.Remote`
stand-in, a value (a numeric answer) is copied as plain data. Calling a stand-in, or sending
it to the ranks with :func:`helpers.runtime.cluster.run`, runs the student's code in the kernel and
brings back only plain data read with ``torch.load(weights_only=True)``; the references, the
hidden cases' expected values and the checks stay in this process. What the kernel prints,
raises or returns cannot make a test pass: a cell scores only if its code, run here, raises
nothing.
"""
from __future__ import annotations

import ast
import base64
import builtins
import contextlib
import io
import sys
import time
import types
from typing import Any, Callable

import cloudpickle
import torch

from helpers.runtime import remote
from helpers.runtime.cluster import ClusterError, CollectiveMismatch, CollectiveTimeout, RankError
from helpers.runtime.ledger import CollectiveRecord, Ledger

# Exceptions the checks tell apart; any other one from the kernel arrives as NotebookError
# (or as the builtin exception of that name).
KNOWN_ERRORS = {cls.__name__: cls for cls in (ClusterError, RankError, CollectiveTimeout, CollectiveMismatch)}

Ask = Callable[[str, float], str]  # (python expression, seconds) -> the text/plain of its value in the kernel


class NotebookError(Exception):
    """An exception raised by the notebook's code that the checks do not know by type."""


class KernelTimeout(Exception):
    """The kernel did not answer within the cell's time limit."""


class Answer(Exception):
    """What came back from the kernel was not plain data (the message says what)."""


MAX_ANSWER_CHARS = 256 * 2**20  # encoded size of one answer from the kernel (a few times the largest needed)


def _fresh(value: Any) -> Any:
    """``value`` rebuilt: containers of the same plain kind, tensors as new tensors holding only their data.

    A loaded tensor keeps attributes set on it in the kernel (``t.item = ...``) and may be a
    view whose elements share memory (``expand``: a few bytes that become gigabytes when
    copied); both are refused or dropped here.
    """
    kind = type(value)
    if kind is torch.Tensor:
        if value.numel() * value.element_size() > value.untyped_storage().nbytes():
            raise Answer("a returned tensor has overlapping elements (an expand()ed or strided view); "
                         "return a tensor with its own memory (.clone() or .contiguous())")
        return torch.empty_like(value, memory_format=torch.preserve_format).copy_(value)
    if kind in (list, tuple):
        return kind(_fresh(v) for v in value)
    if isinstance(value, dict) and kind.__module__ in ("builtins", "collections"):
        return kind((_fresh(k), _fresh(v)) for k, v in value.items())
    return value


def _exception(name: str, message: str, attrs: dict) -> BaseException:
    """The exception the kernel reported, rebuilt here from its name and text only."""
    if name == "CollectiveTimeout":
        unfinished = attrs.get("unfinished")
        return CollectiveTimeout(message, [r for r in unfinished if type(r) is int] if type(unfinished) is list else [])
    if name == "RankError":
        return RankError(message, -1, "", message)
    if name in KNOWN_ERRORS:
        return KNOWN_ERRORS[name](message)
    candidate = getattr(builtins, name, None)
    if isinstance(candidate, type) and issubclass(candidate, Exception):
        try:
            return candidate(message)
        except Exception:  # noqa: BLE001 - a builtin whose constructor wants more (UnicodeDecodeError)
            pass
    return NotebookError(f"{name}: {message}")


def decode(text: str) -> Any:
    """The kernel's encoded answer (the repr of a base64 string) as plain data, or :class:`Answer`."""
    if len(text) > MAX_ANSWER_CHARS:
        raise Answer(f"the notebook's code returned {len(text) * 3 // 4:,} bytes; at most "
                     f"{MAX_ANSWER_CHARS * 3 // 4:,} are accepted")
    try:
        data = base64.b64decode(ast.literal_eval(text), validate=True)
        with torch.serialization.safe_globals([CollectiveRecord]):
            return _fresh(torch.load(io.BytesIO(data), weights_only=True))
    except Answer:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the kernel sent, it is not an answer
        raise Answer(f"the notebook's code returned something that is not plain data "
                     f"(tensors, numbers, strings, lists, tuples, dicts): {str(exc)[:300]}") from None


SHIPPED: set[str] = set()  # "module.name" of each grader function or class sent to a kernel by this process


class _NotingPickler(cloudpickle.Pickler):
    """cloudpickle's pickler that adds to :data:`SHIPPED` each module-level function or class of the
    ``autograder`` package it sends (by value: the kernel cannot import the package)."""

    def reducer_override(self, obj: Any) -> Any:
        module = getattr(obj, "__module__", None)
        if isinstance(obj, (types.FunctionType, type)) and isinstance(module, str) and module.startswith("autograder."):
            name = obj.__qualname__.split(".")[0]
            if hasattr(sys.modules.get(module), name):  # not code a decorator generated (a dataclass's __repr__)
                SHIPPED.add(f"{module}.{name}")
        return super().reducer_override(obj)


def shipped_request(kind: str, target: Any, args: tuple, kwargs: dict) -> str:
    """The request for the kernel (base64 of its cloudpickle), noting what of the grader it carries."""
    buffer = io.BytesIO()
    _NotingPickler(buffer).dump((kind, target, args, kwargs))
    return base64.b64encode(buffer.getvalue()).decode()


class Session:
    """The grader's side of :mod:`helpers.runtime.remote` for one notebook: calls go to its kernel."""

    def __init__(self, ask: Ask) -> None:
        self.ask = ask
        self.deadline = float("inf")

    def call(self, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
        request = shipped_request(kind, target, args, kwargs)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise KernelTimeout("the cell's time ran out")
        outcome = decode(self.ask(f"__import__('helpers.runtime.remote', fromlist=['serve']).serve({request!r})", left))
        if type(outcome) is not dict or ("value" not in outcome and type(outcome.get("error")) is not str):
            raise Answer("the kernel's answer has the wrong shape")
        if "error" in outcome:
            attrs = outcome.get("attrs") if type(outcome.get("attrs")) is dict else {}
            raise _exception(outcome["error"], str(outcome.get("message", "")), attrs)
        value = outcome["value"]
        if kind == "run" and kwargs.get("ledger"):
            return _with_ledger(value)
        return value

    def describe(self, names: list[str]) -> dict[str, Any]:
        """For each name the notebook defines: a Remote stand-in (callables) or its plain value."""
        bound: dict[str, Any] = {}
        for name in names:
            try:
                info = self.call("describe", name, (), {})
            except NameError:
                continue  # not defined in the notebook: using it raises NameError here too
            except Answer:
                info = {"callable": True}  # not plain data: a stand-in, which fails where it is used
            bound[name] = remote.Remote(name) if type(info) is not dict or info.get("callable", True) \
                else info.get("value")
        return bound


def _with_ledger(value: Any) -> tuple[list, Ledger]:
    """``(results, ledger)`` from the kernel's ``(results, per-rank records)``."""
    ok = type(value) is tuple and len(value) == 2 and type(value[1]) is list and all(
        type(rank) is list and all(type(r) is CollectiveRecord for r in rank) for rank in value[1])
    if not ok:
        raise Answer("the kernel's answer has no communication ledger")
    return value[0], Ledger(value[1])


def free_names(source: str) -> list[str]:
    """Names ``source`` reads without defining them anywhere in the cell (sorted)."""
    tree = ast.parse(source)
    read, defined = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else defined).add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return sorted(read - defined)


class TestCells:
    """The namespace test cells of one notebook run in, in the grader's process."""

    def __init__(self, prelude: str, ask: Ask) -> None:
        self.session = Session(ask)
        self.namespace: dict[str, Any] = {"__name__": "__grading__"}
        self.from_notebook: set[str] = set()
        self._run(prelude, "<the import cell>")

    def _run(self, source: str, label: str) -> None:
        exec(compile(source, label, "exec"), self.namespace)  # noqa: S102 - the course's own test code

    def run(self, source: str, label: str, seconds: float) -> tuple[str, BaseException | None]:
        """Run one test cell with at most ``seconds`` of kernel time; return (printed text, error or None).

        Files the notebook's code works with are made, read and removed in the kernel
        (:func:`helpers.runtime.remote.call`), never here: a link planted there leads nowhere here.
        """
        for name in self.from_notebook:
            self.namespace.pop(name, None)
        self.session.deadline = time.monotonic() + seconds
        printed = io.StringIO()
        error: BaseException | None = None
        saved, remote.session = remote.session, self.session
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                wanted = [n for n in free_names(source) if n not in self.namespace and not hasattr(builtins, n)]
                found = self.session.describe(wanted)
                self.from_notebook = set(found)
                self.namespace.update(found)
                self._run(source, label)
        except Exception as exc:  # noqa: BLE001 - a failing test is the cell's outcome
            error = exc
        finally:
            remote.session = saved
        return printed.getvalue(), error
