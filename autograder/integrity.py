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
import operator
import sys
import types
import warnings
from itertools import repeat
from typing import Any

WATCHED_PACKAGES = ("builtins", "math", "operator", "functools", "copy", "pickle", "cloudpickle",
                    "torch", "numpy", "helpers", "autograder")

# What the first check saw, kept as the objects themselves (so no id is reused): for a module
# its watched (name, value) pairs; for a class every attribute name, and its methods' pairs.
_modules: dict[str, tuple[tuple[str, ...], tuple[Any, ...]]] = {}
_classes: dict[int, tuple[str, type, tuple[str, ...], tuple[Any, ...], tuple[str, ...], tuple[Any, ...]]] = {}
_hooks: dict[str, Any] = {}
_MISSING = object()


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
        if module is None or name in _modules or not _watched_module(name):
            continue
        _modules[name] = _pairs(getattr(module, "__dict__", {}), _watched_value)
        for value in list(getattr(module, "__dict__", {}).values()):
            if (isinstance(value, type) and id(value) not in _classes
                    and _watched_module(getattr(value, "__module__", "") or "")):
                _classes[id(value)] = (f"{value.__module__}.{value.__qualname__}", value,
                                       *_pairs(vars(value), lambda k, v: True), *_pairs(vars(value), _method))


def _changes() -> list[str]:
    found = []
    for name, (names, values) in _modules.items():
        module = sys.modules.get(name)
        if module is None:
            found.append(f"module {name} was removed from sys.modules")
            continue
        namespace = getattr(module, "__dict__", {})
        if _unchanged(namespace, names, values):
            continue
        for attr, value in zip(names, values):
            if attr not in namespace:
                found.append(f"{name}.{attr} was deleted")
            elif namespace[attr] is not value and _students(namespace[attr]):
                found.append(f"{name}.{attr} was replaced")
    for label, cls, all_names, all_values, names, values in _classes.values():
        now = vars(cls)
        if len(now) == len(all_names) and _unchanged(now, all_names, all_values):
            continue  # the same attributes, each bound to the same object
        for attr, value in zip(names, values):
            if attr not in now:
                found.append(f"{label}.{attr} was deleted")
            elif now[attr] is not value and _students(now[attr]):
                found.append(f"{label}.{attr} was replaced")
        for attr in now.keys() - set(names):
            if callable(now[attr]) and _students(now[attr]):
                found.append(f"{label}.{attr} was added")
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
        _record_new()
        return ""
    found = _changes()
    _record_new()
    if not found:
        return ""
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    return "; ".join(found[:3]) + more
