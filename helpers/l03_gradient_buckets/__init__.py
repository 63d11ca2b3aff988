"""Lesson 03, gradient buckets: rank-side drivers, a real DDP's buckets, and self-checks.

Vocabulary used throughout:

* parameters are numbered by **registration order**, ``list(model.parameters())``;
* ``param_bytes[i]`` is the size in bytes of parameter ``i``'s gradient;
* the **ready order** is the order in which backward produces the gradients (for a
  sequential model, roughly reverse registration order);
* a **bucket** is a list of parameter indices whose gradients travel in one all-reduce;
  buckets are listed in the order they are launched, which must be the same on every rank.

Times are seconds, sizes bytes, alpha is seconds per message, beta seconds per byte.
Nothing here computes an answer of the assignment: the checks compare with values written
in the test, or verify the stated rule bucket by bucket, and the drivers call the student's
code the way its contract says. For the design exercise, :class:`ClockedNetwork` logs what a
backward did (modelled compute of :class:`BackwardTime` blocks, launches, waits) and
:func:`replay` turns the logs of a group's ranks into the modelled clock.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.runtime import remote
from helpers.shared.checks import first_difference, rounded
from helpers.shared.state import grads_of, mean_of, mse, rank_shard
from helpers.runtime.hooks import Run
from helpers.runtime.slow_network import SlowNetwork

Buckets = list[list[int]]
MB = 2**20  # DDP's bucket_cap_mb counts MiB
SCHEDULE_RTOL = 1e-9  # relative tolerance of schedule and tail comparisons (floats, seconds)


def grad_bytes(model: nn.Module) -> list[int]:
    """Gradient size in bytes of each parameter of ``model``, in registration order."""
    return [p.numel() * p.element_size() for p in model.parameters()]


# --------------------------------------------------------------------------- a real DDP's buckets


def ddp_rebuilt_buckets(ddp: nn.Module) -> Buckets | None:
    """The buckets a DDP model uses after its rebuild (``None`` before the second iteration)."""
    text = ddp._get_ddp_logging_data().get("rebuilt_per_bucket_param_indices")
    if not text:
        return None
    return [[int(i) for i in bucket.split()] for bucket in text.split(",")]


def ddp_buckets_on_rank(model_fn: Callable[[], nn.Module], x: torch.Tensor, y: torch.Tensor,
                        bucket_cap_bytes: int, first_bucket_cap_bytes: int) -> dict[str, Any]:
    """Three DDP iterations; return the ready order DDP recorded and the buckets it rebuilt."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ddp = DDP(model_fn(), bucket_cap_mb_list=[first_bucket_cap_bytes / MB, bucket_cap_bytes / MB])
    xs, ys = rank_shard(x, y)
    for _ in range(3):  # DDP records the ready order in backward 1 and rebuilds in forward 2
        mse(ddp(xs), ys).backward()
    data = ddp._get_ddp_logging_data()
    order = [int(i) for i in data["prev_iteration_grad_ready_order_indices"].split(",")]
    return {"ready_order": order, "buckets": ddp_rebuilt_buckets(ddp), "param_bytes": grad_bytes(ddp.module)}


# --------------------------------------------------------------------------- exercise 1: the assignment rule


def call_assign_buckets(fn: Callable[..., Any], param_bytes: Sequence[int], cap: int, first: int | None,
                        order: Sequence[int] | None) -> Any:
    """``fn(param_bytes, cap[, first][, ready_order=order])``, passing only what the case sets."""
    args = (list(param_bytes), cap) + ((first,) if first is not None or order is not None else ())
    kwargs = {"ready_order": list(order)} if order is not None else {}
    return fn(*args, **kwargs)


def _shown_call(param_bytes: Sequence[int], cap: int, first: int | None, order: Sequence[int] | None) -> str:
    return (f"assign_buckets(param_bytes={list(param_bytes)}, bucket_cap_bytes={cap}, "
            f"first_bucket_cap_bytes={first}, ready_order={None if order is None else list(order)})")


def bucket_rule_violation(param_bytes: Sequence[int], cap: int, first: int | None, order: Sequence[int] | None,
                          got: Any) -> str | None:
    """Which part of DDP's rule ``got`` breaks for this case, or ``None`` if it follows the rule.

    The rule fixes the answer: the buckets, concatenated, are the walk order; every bucket
    but the last reaches its cap (``>=``, the first bucket's cap is ``first``); and no bucket
    reached its cap before its last parameter was added.
    """
    if not isinstance(got, (list, tuple)) or not all(isinstance(b, (list, tuple)) for b in got):
        return f"Return a list of buckets, each a list of parameter indices; got {got!r}."[:300]
    flat = [i for b in got for i in b]
    if not all(type(i) is int for i in flat):
        return "Every bucket must hold Python ints (parameter indices)."
    walk = list(reversed(range(len(param_bytes)))) if order is None else list(order)
    if sorted(flat) != sorted(walk) or any(not b for b in got):
        return "Every parameter must be in exactly one bucket, and no bucket may be empty."
    if flat != walk:
        if flat == list(range(len(param_bytes))):
            return "They follow registration order: walk the parameters in ready order instead."
        return (f"Concatenated, the buckets must be the walk order {walk} "
                f"({'reverse registration order' if order is None else 'ready_order'}).")
    for k, bucket in enumerate(got):
        bucket_cap = first if k == 0 and first is not None else cap
        size = sum(param_bytes[i] for i in bucket)
        before_last = size - param_bytes[bucket[-1]]
        if before_last >= bucket_cap:
            if k == 0 and first is not None and before_last < cap:
                return (f"Bucket 0 reached the first bucket's own cap of {first} B before its last parameter "
                        f"and should have closed there: the first bucket has its own, smaller cap.")
            exactly = any(sum(param_bytes[i] for i in bucket[:j + 1]) == bucket_cap for j in range(len(bucket)))
            return (f"Bucket {k} ({size} B) reached its cap of {bucket_cap} B before its last parameter."
                    + (" A bucket closes when its bytes reach the cap (>=), not only when they exceed it."
                       if exactly else " Close a bucket as soon as its bytes reach the cap."))
        if k < len(got) - 1 and size < bucket_cap:
            return (f"Bucket {k} closed at {size} B, below its cap of {bucket_cap} B. Add the parameter first, "
                    f"then close the bucket if it reached the cap: a bucket may overshoot its cap by one tensor.")
    return None


def assert_buckets(fn: Callable[..., Any], cases: Sequence[tuple]) -> None:
    """``fn`` follows DDP's rule on every case ``(param_bytes, cap, first_cap or None, ready_order or None)``."""
    for param_bytes, cap, first, order in cases:
        got = call_assign_buckets(fn, param_bytes, cap, first, order)
        problem = bucket_rule_violation(param_bytes, cap, first, order, got)
        if problem:
            raise AssertionError(f"{_shown_call(param_bytes, cap, first, order)} returned {got!r}. {problem}"[:1500])


def bucket_mismatch(param_bytes: Sequence[int], cap: int, first: int | None, order: Sequence[int] | None,
                    got: Any, expected: Buckets, source: str = "PyTorch's own assignment") -> str | None:
    """The message for ``got`` differing from ``expected`` (``None`` when equal), with the broken rule."""
    if got == expected:
        return None
    problem = bucket_rule_violation(param_bytes, cap, first, order, got) or ""
    return f"{_shown_call(param_bytes, cap, first, order)} returned {got!r}; {source} is {expected}. {problem}"[:1500]


# --------------------------------------------------------------------------- exercises 2 and 3: schedule, tail


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= SCHEDULE_RTOL * max(1.0, abs(b))


def _show(args: tuple) -> str:
    grad_ready_s, param_bytes, buckets, n, alpha, beta = args
    return (f"(grad_ready_s={rounded(list(grad_ready_s), 9)}, param_bytes={list(param_bytes)}, buckets={buckets}, "
            f"world_size={n}, alpha_s={alpha:g}, beta_s_per_byte={beta:g})")


def schedule_mismatch(args: tuple, got: Any, expected: Sequence[Sequence[float]]) -> str | None:
    """Why ``got`` is not the schedule ``expected`` for ``args`` (``None`` when it is), naming the mistake."""
    try:
        got = [tuple(float(v) for v in triple) for triple in got]
    except (TypeError, ValueError):
        return (f"communication_schedule must return a list of (ready, start, finish) tuples of floats, "
                f"got {got!r}")[:300]
    if len(got) == len(expected) and all(len(g) == 3 and all(map(_close, g, e)) for g, e in zip(got, expected)):
        return None
    grad_ready_s, _, buckets, *_ = args
    hint = ""
    if len(got) == len(expected) and all(len(g) == 3 for g in got):
        first_ready = [min(grad_ready_s[i] for i in b) for b in buckets]
        if all(map(_close, [g[0] for g in got], first_ready)) and any(f != e[0] for f, e in zip(first_ready, expected)):
            hint = " A bucket is ready when its *last* gradient is ready (max), not its first."
        elif all(_close(g[1], e[0]) for g, e in zip(got, expected)) and any(e[1] != e[0] for e in expected):
            hint = (" The start times equal the ready times: all-reduces share one channel and run one after "
                    "another, so a bucket starts at max(ready, previous finish).")
        elif all(_close(g[2], g[1]) for g in got):
            hint = (" Every finish equals its start: enqueueing an all-reduce is not completing it; it takes "
                    "2(N-1)·alpha + 2(N-1)/N·bytes·beta.")
    return (f"communication_schedule{_show(args)} returned {rounded(got, 9)}, expected "
            f"{rounded([tuple(e) for e in expected], 9)}.{hint}")


def assert_schedule(fn: Callable[..., Any], args: tuple, expected: Sequence[Sequence[float]]) -> None:
    """``fn(*args)`` returns the ``(ready, start, finish)`` triples ``expected`` (seconds)."""
    message = schedule_mismatch(args, fn(*args), expected)
    if message:
        raise AssertionError(message)


def tail_mismatch(args: tuple, got: Any, expected_schedule: Sequence[Sequence[float]]) -> str | None:
    """Why ``got`` is not the tail of ``expected_schedule`` (``None`` when it is), naming the mistake."""
    end = max(args[0])
    _, last_start, last_finish = expected_schedule[-1]
    expected = last_finish - end
    if type(got) in (int, float) and _close(got, expected):
        return None
    hint = ""
    if type(got) in (int, float) and _close(got, last_start - end):
        hint = " That is the last bucket's start: the tail ends when its all-reduce finishes."
    elif type(got) in (int, float) and _close(got, last_finish):
        hint = " That is the last finish time itself: the tail is counted from the end of backward."
    return f"communication_tail{_show(args)} returned {got!r}, expected {expected:.6g} s.{hint}"[:1500]


def assert_tail(fn: Callable[..., Any], args: tuple, expected_schedule: Sequence[Sequence[float]]) -> None:
    """``fn(*args)`` returns the tail of ``expected_schedule``: last finish minus the last ready gradient."""
    message = tail_mismatch(args, fn(*args), expected_schedule)
    if message:
        raise AssertionError(message)


# --------------------------------------------------------------------------- design exercise 4: the synchroniser


OVERLAP_TARGET = 0.75  # exposed communication at most this fraction of one all-reduce of the whole gradient


class _BackwardTime(torch.autograd.Function):
    """Identity; its backward reports ``block.seconds`` of modelled compute to ``block.log``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, block: "BackwardTime") -> torch.Tensor:
        ctx.block = block
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        if ctx.block.log is not None:
            ctx.block.log.append(("compute", ctx.block.seconds))
        return grad, None


class BackwardTime(nn.Module):
    """Identity in forward; in backward, ``seconds`` of compute on the modelled clock of a :class:`ClockedNetwork`.

    Placed after a block's layers, it makes that block's backward take ``seconds`` before the
    block's gradients are ready.
    """

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds
        self.log: list | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BackwardTime.apply(x, self)


def timed_block(in_features: int, out_features: int, backward_s: float, output: bool = False) -> list[nn.Module]:
    """Linear, LayerNorm, :class:`BackwardTime` (``backward_s`` seconds) and tanh: four gradients per block.

    An ``output`` block is Linear and :class:`BackwardTime` only (two gradients).
    """
    if output:
        return [nn.Linear(in_features, out_features), BackwardTime(backward_s)]
    return [nn.Linear(in_features, out_features), nn.LayerNorm(out_features), BackwardTime(backward_s), nn.Tanh()]


class TimedMLP(nn.Module):
    """A chain of :func:`timed_block` s of the given widths (the last an output block), each taking
    ``block_backward_s`` of backward."""

    def __init__(self, widths: Sequence[int] = (4, 24, 24, 24, 24, 2), block_backward_s: float = 2e-3) -> None:
        super().__init__()
        pairs = list(zip(widths[:-1], widths[1:]))
        self.net = nn.Sequential(*[m for k, (i, o) in enumerate(pairs)
                                   for m in timed_block(i, o, block_backward_s, output=k == len(pairs) - 1)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def modelled_network(model: nn.Module, group_size: int) -> tuple[float, float]:
    """``(alpha_s, beta_s_per_byte)`` of the network the overlap is measured on, for ``model`` on ``group_size`` ranks.

    One message's latency ``2(N-1) alpha`` equals the transfer time ``2(N-1)/N * m * beta`` of an
    average block's gradients (``m`` bytes), and each is a quarter of an average block's backward:
    all-reducing a block's gradients in one message takes half the block's backward.
    """
    seconds = [m.seconds for m in model.modules() if isinstance(m, BackwardTime)]
    block_bytes = sum(grad_bytes(model)) / len(seconds)
    alpha = sum(seconds) / len(seconds) / (8 * (group_size - 1))
    return alpha, alpha * group_size / block_bytes


class _OwnWork:
    """Handle of a :class:`ClockedNetwork` all-reduce: its result lands only when it is waited on."""

    def __init__(self, network: "ClockedNetwork", position: int, collective: int, tensor: torch.Tensor) -> None:
        self.network, self.position, self.collective, self.tensor = network, position, collective, tensor
        self.delivered = False

    def wait(self, timeout: Any = None) -> bool:
        self.network.log.append(("wait", self.collective))
        self.network.flush(self.position)
        if not self.delivered:
            self.tensor.copy_(self.network.results[self.position])
            self.delivered = True
        return True

    def is_completed(self) -> bool:
        return self.delivered

    def get_future(self) -> torch.futures.Future:
        """A completed future: asking for it waits (on the clock too)."""
        self.wait()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result([self.tensor])
        return future


class ClockedNetwork(SlowNetwork):
    """A :class:`SlowNetwork` (on a rank) that logs what the modelled clock needs, and completes a collective
    only on its own ``wait()``.

    Asynchronous collectives run in launch order, on every rank alike, when a handle (or a later
    one) is waited on, each on a copy of its buffer; the result is written into the buffer only
    when that handle's own ``wait()`` is called, so a skipped ``wait()`` leaves that buffer
    unreduced. ``log`` lists, in order: ``("compute", seconds)`` from each :class:`BackwardTime`
    of ``model``, ``("launch", op, bytes, k)`` for the rank's ``k``-th collective and
    ``("wait", k)`` when it is waited on (a blocking collective is a launch and its wait).
    :func:`replay` turns the logs of a group's ranks into times.
    """

    def __init__(self, model: nn.Module) -> None:
        self.timed = [m for m in model.modules() if isinstance(m, BackwardTime)]

    def __enter__(self) -> "ClockedNetwork":
        self.results: list[torch.Tensor] = []
        self.log: list[tuple] = []
        self.issued = 0
        for block in self.timed:
            block.log = self.log
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        for block in self.timed:
            block.log = None
        super().__exit__(*exc)

    def _intercept(self, op: str, run: Run, args: tuple, kwargs: dict) -> Any:
        tensor = args[0] if args else next(v for key, v in kwargs.items() if key != "async_op")
        k = self.issued
        self.issued += 1
        self.log.append(("launch", op, tensor.numel() * tensor.element_size(), k))
        if not kwargs.get("async_op", False):
            self.log.append(("wait", k))
            return super()._intercept(op, run, args, kwargs)
        work = super()._intercept(op, run, args, kwargs)
        own = _OwnWork(self, work.position, k, work.tensor)
        self.queue[-1] = (*self.queue[-1][:3], own)
        return own

    def flush(self, position: int) -> None:
        """Run every queued collective up to ``position`` in launch order, each on a copy of its buffer."""
        while self.done <= position:
            run, args, kwargs, work = self.queue[self.done]
            scratch = work.tensor.clone()
            if args:
                run((scratch, *args[1:]), kwargs)
            else:
                run((), {**kwargs, "tensor": scratch})
            self.results.append(scratch)
            self.done += 1


def clocked_backwards(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                      batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                      group: dist.ProcessGroup | None = None) -> list[dict[str, Any]]:
    """One ``grad_buckets_cls(model, group=group)`` for several backwards, each under a :class:`ClockedNetwork`.

    Per batch: clear the gradients (``None``), run backward on this rank's shard, then ``wait()``.
    Returns per backward: ``log`` (the clock's log; ``("backward_end",)`` marks where backward
    returned), ``collectives`` (how many collectives the process group saw meanwhile, by any
    route), ``got`` (the gradients after ``wait()``) and ``local`` (a hook-free replica's
    gradients on the same shard).
    """
    model, replica = model_fn(), model_fn()
    grad_buckets = grad_buckets_cls(model, group=group)
    process_group = dist.group.WORLD if group is None else group
    out = []
    for it, (x, y) in enumerate(batches):
        xs, ys = rank_shard(x, y, group)
        model.zero_grad(set_to_none=True)
        replica.zero_grad(set_to_none=True)
        mse(replica(xs), ys).backward()
        before = process_group._get_sequence_number_for_group()
        try:
            with ClockedNetwork(model) as network:
                mse(model(xs), ys).backward()
                network.log.append(("backward_end",))
                grad_buckets.wait()
        except Exception as exc:
            raise RuntimeError(f"in backward {it + 1} of {len(batches)} with one object (the gradients are set to "
                               f"None before each backward): {type(exc).__name__}: {exc}") from exc
        out.append({"log": network.log, "collectives": process_group._get_sequence_number_for_group() - before,
                    "got": grads_of(model), "local": grads_of(replica)})
    return out


def clocked_backwards_on_rank(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                              batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> list[dict[str, Any]]:
    """:func:`clocked_backwards` on the default group (call inside ``run``)."""
    return clocked_backwards(grad_buckets_cls, model_fn, batches)


def _ring_allreduce_s(message_bytes: int, n: int, alpha_s: float, beta_s_per_byte: float) -> float:
    return 0.0 if n == 1 else 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * message_bytes * beta_s_per_byte


def replay(logs: Sequence[Sequence[tuple]], group_size: int, alpha_s: float,
           beta_s_per_byte: float) -> dict[str, Any]:
    """The modelled clock of one backward and ``wait()`` on a group's ranks, from their :class:`ClockedNetwork` logs.

    Each rank's clock advances by its ``compute`` entries and, at a ``wait``, to the finish of
    that collective. The group's collectives share one channel and run one at a time in launch
    order: the ``k``-th starts when every rank has launched it and the ``(k-1)``-th has finished,
    and lasts ``2(N-1) alpha + 2(N-1)/N * bytes * beta``. Returns per rank ``compute_s``,
    ``end_s`` (clock when ``wait()`` returned), ``exposed_s`` (``end_s - compute_s``: time spent
    waiting for communication) and ``launched_in_backward``; and ``messages``: per collective
    ``(bytes, start_s, finish_s)``. Raises ``ValueError`` if a rank waits on a collective
    that some rank never launched.
    """
    n = len(logs)
    clock, compute, at, in_backward = [0.0] * n, [0.0] * n, [0] * n, [0] * n
    launched: list[dict[int, float]] = [{} for _ in range(n)]
    sizes: dict[int, int] = {}
    finish: dict[int, float] = {}
    messages: list[tuple[int, float, float]] = []
    channel = 0.0
    progress = True
    while progress:
        progress = False
        for r in range(n):
            while at[r] < len(logs[r]):
                kind, *rest = logs[r][at[r]]
                if kind == "wait" and rest[0] not in finish:
                    break
                if kind == "compute":
                    clock[r] += rest[0]
                    compute[r] += rest[0]
                elif kind == "launch":
                    launched[r][rest[2]] = clock[r]
                    sizes.setdefault(rest[2], rest[1])
                elif kind == "wait":
                    clock[r] = max(clock[r], finish[rest[0]])
                elif kind == "backward_end":
                    in_backward[r] = len(launched[r])
                at[r] += 1
                progress = True
        k = len(messages)
        while all(k in mine for mine in launched):
            start = max(channel, *(mine[k] for mine in launched))
            channel = start + _ring_allreduce_s(sizes[k], group_size, alpha_s, beta_s_per_byte)
            finish[k] = channel
            messages.append((sizes[k], start, channel))
            k += 1
            progress = True
    if any(at[r] < len(logs[r]) for r in range(n)):
        raise ValueError("a rank waited on a collective that another rank of the group never launched")
    return {"ranks": [{"compute_s": compute[r], "end_s": clock[r], "exposed_s": clock[r] - compute[r],
                       "launched_in_backward": in_backward[r]} for r in range(n)], "messages": messages}


def baseline_seconds(model: nn.Module, group_size: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """The no-overlap baseline: one all-reduce of the whole gradient (all of ``model``'s) after backward."""
    return replay([[("launch", "all_reduce", sum(grad_bytes(model)), 0), ("wait", 0)]] * group_size, group_size,
                  alpha_s, beta_s_per_byte)["ranks"][0]["exposed_s"]


def synchroniser_mistake(backwards: Sequence[Sequence[dict[str, Any]]], expected: Sequence[dict[str, Any]],
                         where: str) -> str | None:
    """What is wrong with the ranks' runs of :func:`clocked_backwards` (``backwards[rank][it]``), or ``None``.

    ``expected[it]`` is the mean over the group of the gradients of backward ``it``. Checks
    that communication went through ``dist.all_reduce`` (the clock saw every collective), and
    that after ``wait()`` every ``.grad`` is the mean.
    """
    for it, exp in enumerate(expected):
        for rank, runs in enumerate(backwards):
            run_ = runs[it]
            label = f"[{where}, backward {it + 1} of {len(expected)}] rank {rank}"
            ops = sorted({entry[1] for entry in run_["log"] if entry[0] == "launch"} - {"all_reduce"})
            seen = sum(entry[0] == "launch" for entry in run_["log"])
            if ops or run_["collectives"] != seen:
                return (f"{label}: {run_['collectives']} collectives went over the group but {seen} through "
                        f"dist.all_reduce{' (also ' + ', '.join(ops) + ')' if ops else ''}. Communicate only with "
                        f"dist.all_reduce, called as dist.all_reduce(...), so that the network model sees it.")
            for name, e in exp.items():
                got, local = run_["got"][name], run_["local"][name]
                if got is None or e is None:
                    if (got is None) != (e is None):
                        return f"{label}: {name!r}.grad is {got}, expected {'None' if e is None else 'a gradient'}."
                    continue
                diff = first_difference({name: got}, {name: e.to(got.dtype)}, atol=1e-5, rtol=1e-4)
                if diff is not None:
                    return (f"{label}: after wait() the gradient is not the mean over the group's ranks ({diff})."
                            f"{_hint(got, local, len(backwards))}")
    return None


def _hint(got: torch.Tensor, local: torch.Tensor, size: int) -> str:
    if torch.allclose(got, local, rtol=1e-5, atol=1e-7) or torch.allclose(got, local / size, rtol=1e-5, atol=1e-7):
        return (" It is still this rank's own gradient: a buffer was read before its all-reduce's own wait() "
                "returned (completing a later all-reduce does not complete an earlier one).")
    if torch.allclose(got, local * size, rtol=1e-4, atol=1e-6):
        return ""
    return (" Are the all-reduces issued in the same order, with the same contents, on every rank? Backward "
            "may produce the gradients in a different order on each rank.")


def overlap_report(logs: Sequence[Sequence[tuple]], group_size: int, alpha_s: float, beta_s_per_byte: float,
                   baseline_s: float) -> tuple[float, str]:
    """``(exposed / baseline, a description of the replayed clock)`` for one backward of a group."""
    clock = replay(logs, group_size, alpha_s, beta_s_per_byte)
    worst = max(clock["ranks"], key=lambda r: r["exposed_s"])
    messages = clock["messages"]
    fraction = worst["exposed_s"] / baseline_s
    last = messages[-1] if messages else (0, 0.0, 0.0)
    text = (f"{worst['exposed_s'] * 1e3:.3f} ms of communication exposed, {fraction:.2f} of the no-overlap baseline "
            f"({baseline_s * 1e3:.3f} ms: one all-reduce of the whole gradient after backward). Backward's compute "
            f"took {worst['compute_s'] * 1e3:.3f} ms; {len(messages)} all-reduce(s), "
            f"{worst['launched_in_backward']} launched before backward returned, paying "
            f"{len(messages) * 2 * (group_size - 1) * alpha_s * 1e3:.3f} ms of latency in all; the last one "
            f"({last[0]} B) finished at {last[2] * 1e3:.3f} ms.")
    return fraction, text


def assert_synchronised(result: Sequence[Sequence[dict[str, Any]]]) -> None:
    """Visible check: after every backward and ``wait()`` each rank holds the mean of the ranks' gradients."""
    expected = [mean_of([runs[it]["local"] for runs in result]) for it in range(len(result[0]))]
    message = synchroniser_mistake(result, expected, f"{len(result)} ranks")
    if message:
        raise AssertionError(message)


def assert_overlap(result: Sequence[Sequence[dict[str, Any]]], model: nn.Module) -> float:
    """Visible check: every backward's exposed communication is at most :data:`OVERLAP_TARGET` of the baseline.

    Returns the largest fraction (exposed / baseline) over the backwards.
    """
    n = len(result)
    network = modelled_network(model, n)
    baseline = baseline_seconds(model, n, *network)
    worst = 0.0
    for it in range(len(result[0])):
        fraction, text = overlap_report([runs[it]["log"] for runs in result], n, *network, baseline)
        if fraction > OVERLAP_TARGET:
            raise AssertionError(f"Backward {it + 1}: {text} The target is at most {OVERLAP_TARGET}.")
        worst = max(worst, fraction)
    return worst


# --------------------------------------------------------------------------- exercise 5: train_step


MARK = 0.25  # the gradient value the stand-in's wait() writes into every .grad


class MarkingBuckets:
    """Stands in for ``GradBuckets`` in the visible test of ``train_step``: it averages nothing.

    ``wait()`` records the gradients and parameters it finds, then overwrites every
    ``.grad`` with ``MARK``, as a real ``wait()`` overwrites them with the mean. An SGD step
    taken after ``wait()`` therefore moves every parameter by exactly ``-lr * MARK``.
    """

    def __init__(self, model: nn.Module) -> None:
        self.watched = list(model.parameters())
        self.calls: list[dict[str, list[torch.Tensor | None]]] = []

    def wait(self) -> None:
        self.calls.append({"grads": [None if p.grad is None else p.grad.detach().clone() for p in self.watched],
                           "params": [p.detach().clone() for p in self.watched]})
        for p in self.watched:
            if p.grad is not None:
                p.grad.fill_(MARK)


def _fresh_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The gradients of the mean squared error of one fresh backward (``model`` untouched)."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(twin(x), y).backward()
    return [p.grad for p in twin.parameters()]


def _allclose(got: Sequence[torch.Tensor | None], expected: Sequence[torch.Tensor]) -> bool:
    return all(g is not None and torch.allclose(g, e, atol=1e-6, rtol=1e-5) for g, e in zip(got, expected))


def train_step_records(train_step_fn: Callable[..., Any], model: nn.Module,
                       batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> list[dict[str, Any]]:
    """Driver: ``train_step`` on each batch with :class:`MarkingBuckets` and plain SGD; what happened.

    Runs where the notebook's code lives (:func:`helpers.runtime.remote.call`), so that the model,
    the optimizer and the stand-in share one process. Returns one record per step, plain
    data only: ``loss`` (the returned value if it is a Python float, else ``None``),
    ``shown`` (its repr), ``waits`` (per ``wait()`` call of this step, the gradients and the
    parameters it found) and ``after`` (the parameters after the step). An exception after
    the first step ends the run with a record ``{"error": text}``; in the first step it
    propagates. Nothing here is compared with anything.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    grad_buckets = MarkingBuckets(model)
    records: list[dict[str, Any]] = []
    for x, y in batches:
        done = len(grad_buckets.calls)
        try:
            loss = train_step_fn(model, optimizer, grad_buckets, x, y)
        except Exception as exc:  # noqa: BLE001 - the earlier steps' records are checked first
            if not records:
                raise
            records.append({"error": f"{type(exc).__name__}: {exc}"[:1000]})
            break
        try:
            shown = repr(loss)[:200]
        except Exception:  # noqa: BLE001
            shown = f"a {type(loss).__name__}"
        records.append({"loss": loss if type(loss) is float else None, "shown": shown,
                        "waits": grad_buckets.calls[done:],
                        "after": [p.detach().clone() for p in model.parameters()]})
    return records


def assert_train_step(train_step_fn: Callable[..., Any], model: nn.Module,
                      batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
    """``train_step`` clears, runs backward, waits once, then steps with the waited gradients.

    :func:`train_step_records` runs the steps (with :class:`MarkingBuckets` and plain SGD)
    where the notebook's code lives; the checks here use only the records it returns. After
    each step every parameter must have moved by exactly ``-lr * MARK``.
    """
    twin = copy.deepcopy(model)  # the expected values are computed here, on this copy
    before = [p.detach().clone() for p in twin.parameters()]
    records = remote.call(train_step_records, train_step_fn, model, batches, lr)
    for step, (record, (x, y)) in enumerate(zip(records, batches), start=1):
        where = f"Step {step}: "
        if "error" in record:
            raise RuntimeError(f"{where}train_step raised {record['error']}")
        with torch.no_grad():
            for p, b in zip(twin.parameters(), before):
                p.copy_(b)
            expected_loss = float(torch.nn.functional.mse_loss(twin(x), y))
        fresh = _fresh_grads(twin, x, y)
        loss = record["loss"]
        if type(loss) is not float or abs(loss - expected_loss) > 1e-6 * max(1.0, abs(expected_loss)):
            raise AssertionError(f"{where}train_step returned {record['shown']}; return the local loss of this "
                                 f"batch as a Python float ({expected_loss:.6g}, loss.item()).")
        if len(record["waits"]) != 1:
            raise AssertionError(f"{where}grad_buckets.wait() was called {len(record['waits'])} "
                                 f"time(s); call it exactly once, after backward and before optimizer.step(): "
                                 f"until it returns, .grad holds this rank's own gradient.")
        seen = record["waits"][-1]
        if any(g is None for g in seen["grads"]) or not _allclose(seen["grads"], fresh):
            accumulated = [f + MARK for f in fresh]
            hint = ("The gradients had not been cleared: the previous step's are added to this one's. Clear "
                    "them (optimizer.zero_grad()) before backward." if _allclose(seen["grads"], accumulated)
                    else "Call wait() after loss.backward(), once the hooks have launched every bucket.")
            raise AssertionError(f"{where}when wait() was called, .grad did not hold this batch's fresh gradients. "
                                 f"{hint}")
        if not _allclose(seen["params"], before):
            raise AssertionError(f"{where}the parameters had already changed when wait() was called: "
                                 f"optimizer.step() ran before the all-reduces were waited on.")
        moved = [b - lr * MARK for b in before]
        after = record["after"]
        if not _allclose(after, moved):
            unchanged = _allclose(after, before)
            raise AssertionError(f"{where}after train_step the parameters did not move by -lr * (the gradients "
                                 f"wait() wrote). " + ("They did not move at all: step after wait(), and clear "
                                                       "the gradients before backward, not after wait()."
                                                       if unchanged else "Call optimizer.step() after wait()."))
        before = after
    if len(records) != len(batches):
        raise AssertionError(f"train_step ran {len(records)} of {len(batches)} steps.")
