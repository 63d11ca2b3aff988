"""Accept a student's return value only as plain data before a hidden check compares it.

A check that compares with ``==`` or ``torch.allclose`` can be fooled by an object that
answers every comparison with "equal" (a class with ``__eq__`` returning True, a float
subclass, a ``torch.Tensor`` subclass whose ``__torch_function__`` makes ``allclose``
True). :func:`plain` copies a value into builtin types and plain ``torch.Tensor``\\ s, and
rejects anything else with an ``AssertionError`` that names what was returned.
"""
from __future__ import annotations

from typing import Any

import torch

_SCALARS = (bool, int, float, str, type(None))


def plain(value: Any, what: str = "the returned value") -> Any:
    """A copy of ``value`` made only of builtin scalars, tuples, lists, dicts and plain tensors.

    Exact types are required (``type(x) is float``, not a subclass); a tensor must be a
    ``torch.Tensor`` itself, and is returned detached and cloned. ``torch.dtype`` and
    ``torch.Size`` pass unchanged. Anything else raises ``AssertionError``.
    """
    kind = type(value)
    if kind in _SCALARS or kind is torch.dtype:
        return value
    if kind is torch.Size:
        return torch.Size(plain(list(value), what))
    if kind is torch.Tensor or kind is torch.nn.Parameter:
        return torch.Tensor.clone(torch.Tensor.detach(value))
    if kind in (list, tuple):
        return kind(plain(v, f"{what}[{i}]") for i, v in enumerate(value))
    if kind is dict:
        return {plain(k, f"a key of {what}"): plain(v, f"{what}[{k!r}]") for k, v in dict.items(value)}
    raise AssertionError(f"{what} is a {kind.__module__}.{kind.__qualname__}; expected plain data "
                         "(bool, int, float, str, None, list, tuple, dict or torch.Tensor)")


def number(value: Any, what: str = "the returned value") -> float:
    """``value`` as a float, accepting only exact ``int``/``float`` (not bool, not a subclass)."""
    if type(value) not in (int, float):
        raise AssertionError(f"{what} must be an int or a float, got a {type(value).__qualname__}: {value!r}"[:300])
    return float(value)


def boolean(value: Any, what: str = "the returned value") -> bool:
    """``value`` if it is exactly a ``bool``."""
    if type(value) is not bool:
        raise AssertionError(f"{what} must be a bool, got a {type(value).__qualname__}")
    return value
