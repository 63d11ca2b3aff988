"""The one place that wraps ``torch.distributed``'s collectives: observers and interceptors.

Three parts of the runtime act on every collective a rank issues: the ledger records it
(:func:`helpers.runtime.ledger.install_recorder`), an armed fault counts it
(:mod:`helpers.runtime.faults`), and :class:`~helpers.runtime.slow_network.SlowNetwork` decides
when an asynchronous one runs. They register here instead of each replacing ``dist.X``:

* an **observer** ``fn(op, bound_arguments)`` is called just before a collective runs;
* an **interceptor** ``fn(op, run, args, kwargs)`` replaces the call of ``op``: it returns what
  the caller gets, and calls ``run(args, kwargs)`` when (and if) the collective should run, which
  notifies the observers and runs it.

:func:`install` wraps both names of each function in :data:`~helpers.runtime.ledger.COLLECTIVES`,
``torch.distributed.X`` and ``torch.distributed.distributed_c10d.X`` (importing the latter must
not bypass a hook), once per process. A collective called while another runs
(``all_gather_into_tensor`` calls ``all_gather_single``) is part of it: hooks see only the outer one.
"""
from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

Observer = Callable[[str, dict[str, Any]], None]
Run = Callable[[tuple, dict], Any]
Interceptor = Callable[[str, Run, tuple, dict], Any]

_observers: list[Observer] = []
_interceptors: dict[str, Interceptor] = {}
_calling = threading.local()  # inside a collective: the calls it makes are part of it
_installed: dict[str, Callable[..., Any]] = {}  # op -> the function it wrapped


def install() -> None:
    """Wrap every collective of this process so that the hooks registered here see it (idempotent)."""
    from helpers.runtime.ledger import COLLECTIVES  # the ledger imports this module

    for op in COLLECTIVES:
        if op in _installed:
            continue
        original = getattr(c10d, op)
        signature = inspect.signature(original)

        def wrapper(*args: Any, __op: str = op, __orig: Callable = original, __sig=signature, **kwargs: Any):
            if getattr(_calling, "inside", False):
                return __orig(*args, **kwargs)
            run = lambda a, k: _run(__op, __orig, __sig, a, k)  # noqa: E731
            interceptor = _interceptors.get(__op)
            return run(args, kwargs) if interceptor is None else interceptor(__op, run, args, kwargs)

        wrapper.__name__ = original.__name__
        wrapper.__doc__ = original.__doc__
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
        _installed[op] = original
        setattr(dist, op, wrapper)
        setattr(c10d, op, wrapper)


def _run(op: str, original: Callable[..., Any], signature: inspect.Signature, args: tuple, kwargs: dict) -> Any:
    if _observers:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for observer in list(_observers):
            observer(op, dict(bound.arguments))
    _calling.inside = True
    try:
        return original(*args, **kwargs)
    finally:
        _calling.inside = False


def add_observer(observer: Observer) -> None:
    """Call ``observer(op, bound arguments)`` before every collective this process runs, from now on."""
    install()
    _observers.append(observer)


def remove_observer(observer: Observer) -> None:
    _observers.remove(observer)


def intercepted() -> tuple[str, ...]:
    """The collectives an interceptor holds now."""
    return tuple(_interceptors)


@contextmanager
def intercepting(ops: tuple[str, ...], interceptor: Interceptor) -> Iterator[None]:
    """Within the block, calls of ``ops`` go to ``interceptor`` (one interceptor per op at a time)."""
    install()
    taken = [op for op in ops if op in _interceptors]
    if taken:
        raise RuntimeError(f"{', '.join(taken)} already intercepted (a SlowNetwork inside another?)")
    _interceptors.update(dict.fromkeys(ops, interceptor))
    try:
        yield
    finally:
        for op in ops:
            _interceptors.pop(op, None)
