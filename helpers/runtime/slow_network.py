"""``SlowNetwork``: asynchronous collectives that complete as late as they are allowed to.

A collective launched with ``async_op=True`` may finish at any moment before its
``wait()`` returns. On a fast loopback it usually finishes almost at once, which hides bugs
such as reading a buffer before waiting, reusing a buffer for the next message, or
computing with parameters whose all-gather has not landed. Inside ``with SlowNetwork():``
(on a rank) the deferrable collectives below run exactly when they must: when their
handle (or a later one) is waited on, when a blocking collective is issued, or when the
block ends, always in launch order, so every rank still issues the same sequence. Data
races become deterministic wrong answers.
"""
from __future__ import annotations

from typing import Any

import torch

from helpers.runtime import hooks
from helpers.runtime.hooks import Run

DEFERRABLE = ("all_reduce", "all_gather_single", "reduce_scatter_single")


class _DeferredWork:
    """Handle of a collective that the :class:`SlowNetwork` runs only when it must."""

    def __init__(self, network: "SlowNetwork", position: int, tensor: torch.Tensor) -> None:
        self.network, self.position, self.tensor = network, position, tensor
        self.future: torch.futures.Future = torch.futures.Future()

    def wait(self, timeout: Any = None) -> bool:
        self.network.flush(self.position)
        return True

    def is_completed(self) -> bool:
        return self.network.done > self.position

    def get_future(self) -> torch.futures.Future:
        """Completed (with ``[tensor]``, as gloo's) when the collective has run."""
        return self.future


class SlowNetwork:
    """Context manager (inside a rank) deferring asynchronous collectives; see the module docstring."""

    def __enter__(self) -> "SlowNetwork":
        self.queue: list[tuple[Run, tuple, dict, _DeferredWork]] = []
        self.done = 0
        self._block = hooks.intercepting(DEFERRABLE, self._intercept)
        self._block.__enter__()
        return self

    def _intercept(self, op: str, run: Run, args: tuple, kwargs: dict) -> Any:
        if not kwargs.get("async_op", False):
            self.flush(len(self.queue) - 1)
            return run(args, kwargs)
        kwargs = {k: v for k, v in kwargs.items() if k != "async_op"}
        tensor = args[0] if args else next(iter(kwargs.values()))
        work = _DeferredWork(self, len(self.queue), tensor)
        self.queue.append((run, args, kwargs, work))
        return work

    def flush(self, position: int) -> None:
        """Run every queued collective up to and including ``position``, in launch order."""
        while self.done <= position:
            run, args, kwargs, work = self.queue[self.done]
            run(args, kwargs)
            self.done += 1
            work.future.set_result([work.tensor])

    def __exit__(self, *exc: Any) -> None:
        self._block.__exit__(*exc)
        if exc[0] is None:
            self.flush(len(self.queue) - 1)
