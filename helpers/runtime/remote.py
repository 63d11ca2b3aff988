"""Calls from the grader into a notebook's kernel, answered with plain data only.

When a notebook is graded, its test cells do not run in the student's kernel: the grader
runs them in its own process (:mod:`autograder.verdicts`), where the names the student's
cells defined are :class:`Remote` stand-ins. Calling one, or sending one to the ranks with
:func:`helpers.runtime.cluster.run`, asks the kernel to do it (:func:`serve`) and brings back only
plain data (tensors, numbers, strings, lists, tuples, dicts, communication ledgers), read
with ``torch.load(weights_only=True)``. The kernel never sees the checks or their expected
values, and nothing it sends back can run code in the grader.

This module is the kernel's half and the one hook :func:`helpers.runtime.cluster.run` consults; it
does nothing unless a grader installed a :data:`session`.
"""
from __future__ import annotations

import base64
import io
import sys
import traceback
from typing import Any, Callable, Protocol

import cloudpickle
import torch

MAX_MESSAGE = 4000  # characters of an error message sent back


class Session(Protocol):
    """What a grader provides while it runs a test cell (see :mod:`autograder.verdicts`)."""

    def call(self, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
        """Run ``target(*args, **kwargs)`` (``kind="call"``) or ``run(target, *args, **kwargs)`` (``"run"``)
        in the kernel."""


session: Session | None = None  # set by the grader in its own process, never in a kernel


class Remote:
    """A name the student's notebook defines, standing in for it in the grader's process.

    Pickled, it is just the name: unpickled in the kernel it is the student's object.
    """

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if session is None:
            raise RuntimeError(f"{self.__name__} lives in the notebook's kernel and no grader is attached")
        return session.call("call", self, args, kwargs)

    def __reduce__(self) -> tuple[Callable[[str], Any], tuple[str]]:
        return student, (self.__name__,)

    def __repr__(self) -> str:
        return f"<the notebook's {self.__name__}>"


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` where the notebook's code lives; in a notebook, simply the call.

    When a grader runs the tests, the call is sent to the kernel (inside its sandbox) and
    its result comes back as plain data. Use it for a *driver* (a function that calls the
    student's code on some inputs and returns plain results) that needs the student's
    objects in one process (an autograd graph, a module changed in place), and for every
    look at files the notebook's code wrote (a listing, a removal): in the kernel a path
    means what it means to that code, and a link it planted leads nowhere outside.
    """
    if session is not None:
        return session.call("call", fn, args, kwargs)
    return fn(*args, **kwargs)


def student(name: str) -> Any:
    """In the kernel: the object the notebook bound to ``name``."""
    namespace = sys.modules["__main__"].__dict__
    if name not in namespace:
        raise NameError(f"name {name!r} is not defined in the notebook")
    return namespace[name]


class _Finder(cloudpickle.Pickler):
    """cloudpickle's pickler that notes whether the object holds a :class:`Remote`."""

    found = False

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Remote:
            self.found = True
        return super().reducer_override(obj)


def ships_student_code(obj: Any) -> bool:
    """Whether ``obj`` (a function and what it closes over) refers to a name of the notebook."""
    finder = _Finder(io.BytesIO())
    try:
        finder.dump(obj)
    except Exception:  # noqa: BLE001 - what cannot be pickled cannot be shipped either; run() says so
        return False
    return finder.found


def encode(value: Any) -> str:
    """``value`` as text to send (``torch.save``, then base64)."""
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return base64.b64encode(buffer.getvalue()).decode()


def serve(request: str) -> str:
    """In the kernel: run one encoded request of the grader; return the encoded outcome.

    The outcome is ``{"value": ...}`` or ``{"error": name, "message": text, "attrs": {...}}``.
    A value that is not plain data comes back as an error naming its type.
    """
    from . import cluster

    try:
        kind, target, args, kwargs = cloudpickle.loads(base64.b64decode(request))
        if kind == "run":
            value = cluster.run(target, *args, **kwargs)
            if isinstance(value, tuple) and len(value) == 2 and type(value[1]).__name__ == "Ledger":
                value = (value[0], value[1].records)
        elif kind == "describe":
            obj = student(target)
            value = {"callable": True} if callable(obj) else {"callable": False, "value": obj}
        else:
            value = target(*args, **kwargs)
        return encode({"value": value})
    except BaseException as exc:  # noqa: BLE001 - every outcome goes back to the grader as data
        attrs = {"unfinished": list(getattr(exc, "unfinished", []))} if hasattr(exc, "unfinished") else {}
        message = str(exc) if str(exc) else "".join(traceback.format_exception_only(type(exc), exc)).strip()
        try:
            return encode({"error": type(exc).__name__, "message": message[:MAX_MESSAGE], "attrs": attrs})
        except Exception:  # noqa: BLE001
            return encode({"error": "RuntimeError", "message": "an error that could not be described", "attrs": {}})
