"""Inside the grading kernel: notice when a cell changed what the hidden tests rely on.

The grader (:mod:`autograder.guard`) evaluates :func:`check` after every cell through the
kernel's ``user_expressions``, which IPython evaluates with plain ``eval``: input and AST
transformers do not apply to it. The first call records a fingerprint; each later call
compares with it and returns one line naming what changed ("" when nothing did):

* functions, classes and modules bound in the modules the checks use (torch, numpy,
  math, builtins, the course's ``helpers`` and ``autograder``), and the methods of their
  classes (``torch.Tensor.__eq__``);
* the IPython shell's input transformers, AST transformers, event callbacks and any method
  replaced on the shell object;
* the interpreter's trace and profile functions, import hooks and display/except hooks.

Modules imported after the first call are fingerprinted when first seen. Libraries rebind
some of their own functions lazily (``torch._dynamo`` wraps ``torch.manual_seed``), so a
change counts only when the new value is the student's: code compiled from a notebook cell,
or a builtin such as ``print`` standing in for a check. This backs up
:mod:`autograder.policy`, which refuses the code that would make such changes.
"""
from __future__ import annotations

import builtins
import ctypes
import gc
import operator
import sys
import types
import warnings
from itertools import repeat
from typing import Any

WATCHED_PACKAGES = ("builtins", "math", "operator", "functools", "copy", "pickle", "cloudpickle",
                    "torch", "numpy", "helpers", "autograder")

# What the first check saw, kept as the objects themselves (so no id is reused): for a module
# its watched (name, value) pairs; for a class its namespace, every attribute and its methods.
_modules: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {}
_classes: dict[int, tuple[str, type, Any, tuple[str, ...], tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]] = {}
_hooks: dict[str, Any] = {}
_MISSING = object()

# CPython 3.11 gives each dict a version (PEP 509, ``ma_version_tag``) that changes whenever
# the dict is modified. A namespace whose version is the one it had when last compared in
# full cannot have changed, so the check after each cell compares only modified namespaces
# (measured: about 5 ms instead of 30 ms for torch's 5000 namespaces). Where versions are unavailable
# or misbehave (the self-test below), every namespace is compared in full, as before.
_VERSION_OFFSET = 24  # bytes into a PyDictObject: ob_refcnt, ob_type and ma_used come first
_compared: dict[int, tuple[dict, int]] = {}  # id(namespace) -> (namespace, version at its last full comparison)


def _version(namespace: dict) -> int:
    return ctypes.c_uint64.from_address(id(namespace) + _VERSION_OFFSET).value


def _versions_mark_every_change() -> bool:
    """Whether a dict's version changes on insert, replace and delete, and only then (a self-test)."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return False
    probe = {"kept": object()}
    versions = [_version(probe)]
    for change in (lambda: probe.update(kept=object()), lambda: probe.update(new=1), lambda: probe.pop("new")):
        change()
        versions.append(_version(probe))
    return len(set(versions)) == len(versions) and _version(probe) == versions[-1]


_VERSIONED = _versions_mark_every_change()


def _untouched(namespace: dict) -> bool:
    """Whether ``namespace`` was not modified since it was last compared in full (False if unknown)."""
    last = _compared.get(id(namespace))
    return _VERSIONED and last is not None and last[0] is namespace and _version(namespace) == last[1]


def _compared_now(namespace: dict, version: int | None) -> None:
    if version is not None:
        _compared[id(namespace)] = (namespace, version)


def _dict_version(namespace: Any) -> int | None:
    return _version(namespace) if _VERSIONED and type(namespace) is dict else None


def _class_dict(cls: type) -> Any:
    """The dict behind ``vars(cls)`` (a read-only proxy of it)."""
    inner = gc.get_referents(vars(cls))
    return inner[0] if len(inner) == 1 and type(inner[0]) is dict else vars(cls)


def _watched_module(name: str) -> bool:
    return name.split(".")[0] in WATCHED_PACKAGES


def _watched_value(name: str, value: Any) -> bool:
    return callable(value) or isinstance(value, types.ModuleType) or (name.isupper() and not name.startswith("_"))


def _pairs(namespace: Any, keep: Any) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    kept = [(k, v) for k, v in list(namespace.items()) if keep(k, v)]
    return tuple(k for k, _ in kept), tuple(v for _, v in kept)


def _unchanged(namespace: Any, names: tuple[str, ...], values: tuple[Any, ...]) -> bool:
    """Whether ``namespace`` still binds each of ``names`` to the same object (a loop in C: this runs after every cell)."""
    return all(map(operator.is_, map(namespace.get, names, repeat(_MISSING)), values))


def _method(name: str, value: Any) -> bool:
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def _from_notebook(function: Any) -> bool:
    code = getattr(function, "__code__", None)
    filename = getattr(code, "co_filename", "") or ""
    return filename.startswith("<") or "ipykernel_" in filename


def _students(value: Any) -> bool:
    """Whether ``value`` was written in the notebook, or is a builtin standing in for a function."""
    for attr in ("__func__", "func", "fget"):  # methods, partials, staticmethods, properties
        inner = getattr(value, attr, None)
        if inner is not None and inner is not value:
            return _students(inner)
    if isinstance(value, types.FunctionType):
        return _from_notebook(value)
    if isinstance(value, type):
        return (value.__module__ in ("__main__", "builtins")
                or any(_from_notebook(v) for v in list(vars(value).values())))
    if isinstance(value, types.BuiltinFunctionType):
        return getattr(value, "__module__", None) == "builtins"
    return type(value).__module__ == "__main__"  # an instance of a class from the notebook


def _shell_hooks() -> dict[str, Any]:
    hooks: dict[str, Any] = {
        "sys.settrace": id(sys.gettrace()) if sys.gettrace() else None,
        "sys.setprofile": id(sys.getprofile()) if sys.getprofile() else None,
        "sys.meta_path": tuple(id(f) for f in sys.meta_path),
        "sys.path_hooks": tuple(id(h) for h in sys.path_hooks),
        "sys.displayhook": id(sys.displayhook),
        "sys.excepthook": id(sys.excepthook),
        "builtins.__import__": id(builtins.__import__),
    }
    shell = _shell()
    if shell is not None:
        for name in ("input_transformers_cleanup", "input_transformers_post", "ast_transformers"):
            hooks[f"IPython {name}"] = tuple(id(t) for t in getattr(shell, name, []))
        manager = getattr(shell, "input_transformer_manager", None)
        hooks["IPython input_transformer_manager"] = id(manager)
        for name in ("cleanup_transforms", "line_transforms", "token_transformers"):
            hooks[f"IPython input_transformer_manager.{name}"] = tuple(id(t) for t in getattr(manager, name, []))
        callbacks = getattr(getattr(shell, "events", None), "callbacks", {})
        for event, registered in callbacks.items():
            hooks[f"IPython event {event}"] = tuple(id(c) for c in registered)
        hooks["IPython shell methods"] = tuple(sorted(
            (k, id(v)) for k, v in vars(shell).items() if isinstance(v, (types.FunctionType, types.MethodType))))
    return hooks


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _record_new() -> None:
    """Fingerprint watched modules and their classes not seen before."""
    for name, module in list(sys.modules.items()):
        if module is not None and name not in _modules and _watched_module(name):
            _record_module(name, module)


def _record_module(name: str, module: types.ModuleType) -> None:
    """Fingerprint one module as it is now, and its classes not fingerprinted yet."""
    namespace = getattr(module, "__dict__", {})
    version = _dict_version(namespace)
    _modules[name] = _pairs(namespace, _watched_value)
    _compared_now(namespace, version)
    for value in list(namespace.values()):
        if (isinstance(value, type) and id(value) not in _classes
                and _watched_module(getattr(value, "__module__", "") or "")):
            _record_class(value)


def _record_class(cls: type) -> None:
    now = _class_dict(cls)
    version = _dict_version(now)
    _classes[id(cls)] = (f"{cls.__module__}.{cls.__qualname__}", cls, now, tuple(now), tuple(now.values()),
                         *_pairs(now, _method))
    _compared_now(now, version)


def fingerprint_imported() -> None:
    """Fingerprint the modules imported so far, for processes forked from this one.

    The grader's kernel template calls this before it forks kernels. A kernel's first
    :func:`check` then re-takes the fingerprint only of the namespaces modified since (their
    dict version changed: IPython's start-up, for one, removes ``builtins.exit``); the others
    are exactly as fingerprinted. The result is the fingerprint a fresh first check would take.
    """
    with warnings.catch_warnings():  # deprecated module attributes warn when touched
        warnings.simplefilter("ignore")
        _record_new()


def _refresh_inherited() -> None:
    """The first check in a forked process: the fingerprint of now, reusing the untouched namespaces'."""
    for name in list(_modules):
        module = sys.modules.get(name)
        if module is None:
            del _modules[name]
        elif not _untouched(getattr(module, "__dict__", {})):
            _record_module(name, module)
    for _, cls, now, *_ in list(_classes.values()):
        if not _untouched(now):
            _record_class(cls)


def _lost_bindings(label: str, namespace: Any, names: tuple[str, ...], values: tuple[Any, ...]) -> list[str]:
    """Which of ``names`` were deleted from ``namespace``, or bound to the student's code instead of ``values``."""
    lost = []
    for attr, value in zip(names, values):
        if attr not in namespace:
            lost.append(f"{label}.{attr} was deleted")
        elif namespace[attr] is not value and _students(namespace[attr]):
            lost.append(f"{label}.{attr} was replaced")
    return lost


def _changes() -> list[str]:
    found = []
    for name, (names, values) in _modules.items():
        module = sys.modules.get(name)
        if module is None:
            found.append(f"module {name} was removed from sys.modules")
            continue
        namespace = getattr(module, "__dict__", {})
        if _untouched(namespace):
            continue
        version, before = _dict_version(namespace), len(found)
        if not _unchanged(namespace, names, values):
            found += _lost_bindings(name, namespace, names, values)
        if len(found) == before:  # a change is reported again by every later check
            _compared_now(namespace, version)
    for label, _, now, all_names, all_values, names, values in _classes.values():  # a class's dict is never replaced
        if _untouched(now):
            continue
        version, before = _dict_version(now), len(found)
        if len(now) != len(all_names) or not _unchanged(now, all_names, all_values):
            found += _lost_bindings(label, now, names, values)
            for attr in now.keys() - set(names):
                if callable(now[attr]) and _students(now[attr]):
                    found.append(f"{label}.{attr} was added")
        if len(found) == before:
            _compared_now(now, version)
    hooks = _shell_hooks()
    for key in sorted(hooks.keys() | _hooks.keys()):
        if hooks.get(key) != _hooks.get(key):
            found.append(f"{key} changed")
    return found


def check() -> str:
    """"" if nothing watched changed since the first call, else one line naming the changes."""
    with warnings.catch_warnings():  # deprecated module attributes warn when touched
        warnings.simplefilter("ignore")
        return _check()


def _check() -> str:
    if not _hooks:
        _hooks.update(_shell_hooks())
        _refresh_inherited()
        _record_new()
        return ""
    found = _changes()
    _record_new()
    if not found:
        return ""
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(found[:3]) + more
