"""Lesson 03, gradient buckets: references, a slow-network harness, rank-side drivers, checks.

Vocabulary used throughout:

* parameters are numbered by **registration order**, ``list(model.parameters())``;
* ``param_bytes[i]`` is the size in bytes of parameter ``i``'s gradient;
* the **ready order** is the order in which backward produces the gradients (for a
  sequential model, roughly reverse registration order);
* a **bucket** is a list of parameter indices whose gradients travel in one all-reduce;
  buckets are listed in the order they are launched, which must be the same on every rank.

Times are seconds, sizes bytes, alpha is seconds per message, beta seconds per byte.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers.checks import first_difference, rounded
from helpers.costs import ring_allreduce_bytes
from helpers.slow_network import SlowNetwork
from helpers.reference import mean_of, mse, rank_shard, set_rank_gradients, sgd_reference, state_of

Buckets = list[list[int]]
MB = 2**20  # DDP's bucket_cap_mb counts MiB


# --------------------------------------------------------------------------- references


def assign_buckets(
    param_bytes: Sequence[int],
    bucket_cap_bytes: int,
    first_bucket_cap_bytes: int | None = None,
    ready_order: Sequence[int] | None = None,
) -> Buckets:
    """DDP's bucket assignment (``dist._compute_bucket_assignment_by_size``, one dtype).

    Walk the parameters in ``ready_order`` (default: reverse registration order), append
    each to the open bucket and close the bucket as soon as its bytes reach its cap
    (``>=``). The first bucket's cap is ``first_bucket_cap_bytes`` (default: the common
    cap), every later bucket's is ``bucket_cap_bytes``. A non-empty open bucket at the end
    is the last bucket.
    """
    order = list(reversed(range(len(param_bytes)))) if ready_order is None else list(ready_order)
    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
    buckets: Buckets = []
    current: list[int] = []
    size = 0
    for i in order:
        current.append(i)
        size += param_bytes[i]
        if size >= cap:
            buckets.append(current)
            current, size, cap = [], 0, bucket_cap_bytes
    if current:
        buckets.append(current)
    return buckets


def torch_bucket_assignment(
    param_bytes: Sequence[int],
    bucket_cap_bytes: int,
    first_bucket_cap_bytes: int | None = None,
    ready_order: Sequence[int] | None = None,
) -> Buckets:
    """The same assignment computed by PyTorch's own C++ function (the ground truth).

    Builds float32 tensors of the given byte sizes in ready order and calls
    ``dist._compute_bucket_assignment_by_size`` with DDP's size limits
    ``[first cap, cap]`` and the ready order as tensor indices, as DDP's bucket rebuild does.
    """
    order = list(reversed(range(len(param_bytes)))) if ready_order is None else list(ready_order)
    if any(b % 4 for b in param_bytes):
        raise ValueError("param_bytes must be multiples of 4 (float32 gradients)")
    tensors = [torch.empty(param_bytes[i] // 4) for i in order]
    first = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
    limits = [first, bucket_cap_bytes] if first != bucket_cap_bytes else [bucket_cap_bytes]
    buckets, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(order), order)
    return [list(b) for b in buckets]


def allreduce_seconds(message_bytes: float, world_size: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """Alpha-beta time of one ring all-reduce: ``2(N-1) alpha + 2(N-1)/N * bytes * beta``."""
    if world_size == 1:
        return 0.0
    return 2 * (world_size - 1) * alpha_s + ring_allreduce_bytes(int(message_bytes), 1, world_size) * beta_s_per_byte


def communication_schedule(
    grad_ready_s: Sequence[float],
    param_bytes: Sequence[int],
    buckets: Buckets,
    world_size: int,
    alpha_s: float,
    beta_s_per_byte: float,
) -> list[tuple[float, float, float]]:
    """``(ready, start, finish)`` in seconds of each bucket's all-reduce, in bucket order.

    A bucket is ready when its *last* gradient is (``max``); all-reduces run one at a
    time in bucket order, so a bucket starts at ``max(ready, previous finish)``; it lasts
    :func:`allreduce_seconds` of its bytes.
    """
    out: list[tuple[float, float, float]] = []
    previous_finish = float("-inf")
    for bucket in buckets:
        ready = max(grad_ready_s[i] for i in bucket)
        start = max(ready, previous_finish)
        finish = start + allreduce_seconds(sum(param_bytes[i] for i in bucket), world_size, alpha_s, beta_s_per_byte)
        out.append((ready, start, finish))
        previous_finish = finish
    return out


def communication_tail(
    grad_ready_s: Sequence[float],
    param_bytes: Sequence[int],
    buckets: Buckets,
    world_size: int,
    alpha_s: float,
    beta_s_per_byte: float,
) -> float:
    """Seconds from the last gradient being ready to the last all-reduce finishing."""
    schedule = communication_schedule(grad_ready_s, param_bytes, buckets, world_size, alpha_s, beta_s_per_byte)
    return schedule[-1][2] - max(grad_ready_s)


def grad_bytes(model: nn.Module) -> list[int]:
    """Gradient size in bytes of each parameter of ``model``, in registration order."""
    return [p.numel() * p.element_size() for p in model.parameters()]


class ReferenceGradBuckets:
    """Bucketed asynchronous all-reduce driven by gradient hooks (the exercise's contract).

    ``grad_ready(i)`` marks parameter ``i`` ready and launches, in bucket order, every
    complete bucket whose predecessors are launched: its gradients are copied into a new
    flat buffer and ``dist.all_reduce(buffer, async_op=True)`` is called. ``wait()`` waits
    on each handle in launch order, copies ``buffer / N`` back into the ``.grad`` tensors and
    resets for the next iteration. ``events`` collects ``(kind, bucket, perf_counter)`` for
    the chapter's measured timeline, across iterations (clear it to keep one iteration).
    """

    def __init__(self, model: nn.Module, buckets: Buckets, group: Any = None) -> None:
        self.params = list(model.parameters())
        self.buckets = [list(b) for b in buckets]
        self.group = group
        self.events: list[tuple[str, int, float]] = []
        self._reset()
        for bucket in self.buckets:
            for i in bucket:
                self.params[i].register_post_accumulate_grad_hook(lambda p, i=i: self.grad_ready(i))

    def _reset(self) -> None:
        self.ready: set[int] = set()
        self.pending: list[tuple[Any, torch.Tensor]] = []

    def grad_ready(self, index: int) -> None:
        self.ready.add(index)
        while len(self.pending) < len(self.buckets) and self.ready.issuperset(self.buckets[len(self.pending)]):
            k = len(self.pending)
            buffer = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[k]])
            self.events.append(("launch", k, time.perf_counter()))
            handle = dist.all_reduce(buffer, group=self.group, async_op=True)
            self.events.append(("enqueued", k, time.perf_counter()))
            self.pending.append((handle, buffer))

    def wait(self) -> None:
        if len(self.pending) != len(self.buckets):
            raise RuntimeError(f"only {len(self.pending)} of {len(self.buckets)} buckets were launched: "
                               "some gradients were never produced")
        n = dist.get_world_size(self.group)
        for k, (handle, buffer) in enumerate(self.pending):
            handle.wait()
            self.events.append(("done", k, time.perf_counter()))
            offset = 0
            for i in self.buckets[k]:
                grad = self.params[i].grad
                grad.copy_(buffer[offset: offset + grad.numel()].view_as(grad) / n)
                offset += grad.numel()
        self._reset()


# --------------------------------------------------------------------------- rank-side drivers


def grad_buckets_on_rank(
    grad_buckets_cls: Callable[..., Any],
    model_fn: Callable[[], nn.Module],
    buckets: Buckets,
    ready_orders: Sequence[Sequence[int]],
    seed: int,
    iterations: int = 2,
    slow: bool = True,
) -> dict[str, Any]:
    """Drive a student's bucket class by hand with rank-dependent gradients and ready orders.

    Each iteration sets rank-dependent ``.grad`` values (:func:`set_rank_gradients` with
    seed ``seed + iteration``), calls ``grad_ready(i)`` in ``ready_orders[rank]`` (ready
    orders may differ between ranks, as they do in real models with branches), then
    ``wait()``. Returns, per iteration, the gradients set and the gradients after ``wait``.
    """
    model = model_fn()
    rank = dist.get_rank()
    obj = grad_buckets_cls(model, buckets)
    names = [n for n, _ in model.named_parameters()]
    before, after = [], []
    for it in range(iterations):
        before.append(set_rank_gradients(model, seed + it))
        with SlowNetwork() if slow else nullcontext():
            for i in ready_orders[rank]:
                obj.grad_ready(i)
            obj.wait()
        after.append({n: p.grad.detach().clone() for n, p in zip(names, model.parameters())})
    return {"before": before, "after": after}


def backward_on_rank(
    grad_buckets_cls: Callable[..., Any],
    model_fn: Callable[[], nn.Module],
    buckets: Buckets,
    x: torch.Tensor,
    y: torch.Tensor,
    slow: bool = False,
) -> dict[str, Any]:
    """A real backward on this rank's shard with the student's hooks attached, then ``wait()``.

    Returns the gradients after ``wait`` and the reference: the same gradients averaged with
    one blocking all-reduce per parameter (issued after the bucketed ones).
    """
    model = model_fn()
    obj = grad_buckets_cls(model, buckets)
    xs, ys = rank_shard(x, y)
    with SlowNetwork() if slow else nullcontext():
        mse(model(xs), ys).backward()
        local = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        obj.wait()
    got = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    for g in local.values():
        dist.all_reduce(g)
        g.div_(dist.get_world_size())
    return {"got": got, "expected": local}


def train_on_rank(
    train_step_fn: Callable[..., float],
    model_fn: Callable[[], nn.Module],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    bucket_cap_bytes: int,
    first_bucket_cap_bytes: int,
) -> dict[str, Any]:
    """Train with the student's ``train_step`` and :class:`ReferenceGradBuckets`, then with DDP.

    Both sides use the same caps: DDP is built with ``bucket_cap_mb_list=[first, cap]``.
    Bucketing changes when gradients travel, never their values, so the final states must
    agree. Returns the initial state, both final states and the losses.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model_fn()
    init = state_of(model)
    buckets = assign_buckets(grad_bytes(model), bucket_cap_bytes, first_bucket_cap_bytes)
    grad_buckets = ReferenceGradBuckets(model, buckets)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        losses.append(train_step_fn(model, opt, grad_buckets, xs, ys))
    mine = state_of(model)

    ddp_model = model_fn()
    ddp = DDP(ddp_model, bucket_cap_mb_list=[first_bucket_cap_bytes / MB, bucket_cap_bytes / MB])
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        ddp_opt.zero_grad(set_to_none=True)
        mse(ddp(xs), ys).backward()
        ddp_opt.step()
    return {"init": init, "state": mine, "ddp": state_of(ddp_model), "losses": losses}


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


# --------------------------------------------------------------------------- checks


def _bucket_hint(got: Buckets, expected: Buckets, param_bytes: Sequence[int], cap: int, first: int | None,
                 order: Sequence[int] | None) -> str:
    forward = list(range(len(param_bytes)))
    if got == assign_buckets(param_bytes, cap, first, forward) and got != expected:
        return " They are the buckets of registration order: walk the parameters in ready order instead."
    if got == _assign_closing_above_cap(param_bytes, cap, first, order):
        return (" A bucket closes when its bytes reach the cap (>=), not only when they exceed it: "
                "check a bucket whose bytes equal the cap exactly.")
    if first is not None and got == assign_buckets(param_bytes, cap, None, order):
        return " The first bucket has its own, smaller cap."
    if sorted(i for b in got for i in b) != sorted(range(len(param_bytes))):
        return " Every parameter must be in exactly one bucket."
    return ""


def _assign_closing_above_cap(param_bytes: Sequence[int], cap: int, first: int | None,
                              order: Sequence[int] | None) -> Buckets:
    """The off-by-one variant (close on ``>``; sizes are integers), only used to name that mistake."""
    return assign_buckets(param_bytes, cap + 1, None if first is None else first + 1, order)


def assert_buckets(fn: Callable[..., Buckets], cases: Sequence[tuple]) -> None:
    """``fn`` agrees with PyTorch's ``_compute_bucket_assignment_by_size`` on every case.

    A case is ``(param_bytes, cap, first_cap or None, ready_order or None)``.
    """
    for param_bytes, cap, first, order in cases:
        expected = torch_bucket_assignment(param_bytes, cap, first, order)
        args = (list(param_bytes), cap) + ((first,) if first is not None or order is not None else ())
        kwargs = {"ready_order": list(order)} if order is not None else {}
        got = fn(*args, **kwargs)
        got = [list(map(int, b)) for b in got] if isinstance(got, (list, tuple)) else got
        if got != expected:
            raise AssertionError(
                f"assign_buckets(param_bytes={list(param_bytes)}, bucket_cap_bytes={cap}, "
                f"first_bucket_cap_bytes={first}, ready_order={order}) returned {got}; PyTorch's "
                f"own assignment is {expected}.{_bucket_hint(got, expected, param_bytes, cap, first, order)}"
            )


def assert_ddp_buckets(fn: Callable[..., Buckets], result: dict[str, Any], cap: int, first: int) -> None:
    """``fn`` reproduces the buckets a real DDP rebuilt from the ready order it recorded."""
    got = fn(result["param_bytes"], cap, first, ready_order=result["ready_order"])
    if [list(map(int, b)) for b in got] != result["buckets"]:
        raise AssertionError(
            f"Real DistributedDataParallel recorded the ready order {result['ready_order']} and rebuilt the "
            f"buckets {result['buckets']}; assign_buckets({result['param_bytes']}, {cap}, {first}, "
            f"ready_order=...) returned {got}."
        )


def _schedule_hint(got: Sequence[Sequence[float]], args: tuple) -> str:
    grad_ready_s, param_bytes, buckets, n, alpha, beta = args
    ref = communication_schedule(*args)
    first_ready = [min(grad_ready_s[i] for i in b) for b in buckets]
    if all(abs(g[0] - f) < 1e-12 for g, f in zip(got, first_ready)) and first_ready != [r[0] for r in ref]:
        return " A bucket is ready when its *last* gradient is ready (max), not its first."
    if all(abs(g[1] - r[0]) < 1e-12 for g, r in zip(got, ref)) and any(r[1] != r[0] for r in ref):
        return (" The start times equal the ready times: all-reduces share one channel and run one after "
                "another, so a bucket starts at max(ready, previous finish).")
    if all(abs(g[2] - g[1]) < 1e-12 for g in got):
        return (" Every finish equals its start: enqueueing an all-reduce is not completing it; it takes "
                "2(N-1)·alpha + 2(N-1)/N·bytes·beta.")
    return ""


def assert_schedule(fn: Callable[..., Any], cases: Sequence[tuple]) -> None:
    """``fn`` returns the reference ``(ready, start, finish)`` triples on every case."""
    for args in cases:
        expected = communication_schedule(*args)
        got = fn(*args)
        try:
            got = [tuple(float(v) for v in triple) for triple in got]
        except TypeError:
            raise AssertionError(f"communication_schedule must return a list of (ready, start, finish) "
                                 f"tuples of floats, got {got!r}") from None
        ok = len(got) == len(expected) and all(
            abs(g - e) <= 1e-9 * max(1.0, abs(e)) for gt, et in zip(got, expected) for g, e in zip(gt, et))
        if not ok:
            raise AssertionError(
                f"communication_schedule{_show(args)} returned {rounded(got, 9)}, expected {rounded(expected, 9)}."
                f"{_schedule_hint(got, args)}")


def assert_tail(fn: Callable[..., float], cases: Sequence[tuple]) -> None:
    """``fn`` returns :func:`communication_tail` on every case."""
    for args in cases:
        expected = communication_tail(*args)
        got = fn(*args)
        if not isinstance(got, (int, float)) or abs(got - expected) > 1e-9 * max(1.0, abs(expected)):
            sched = communication_schedule(*args)
            hint = ""
            if isinstance(got, (int, float)) and abs(got - (sched[-1][1] - max(args[0]))) < 1e-12:
                hint = " That is the last bucket's start: the tail ends when its all-reduce finishes."
            elif isinstance(got, (int, float)) and abs(got - sched[-1][2]) < 1e-12:
                hint = " That is the last finish time itself: the tail is counted from the end of backward."
            raise AssertionError(f"communication_tail{_show(args)} returned {got!r}, expected "
                                 f"{expected:.6g} s.{hint}")


def _show(args: tuple) -> str:
    grad_ready_s, param_bytes, buckets, n, alpha, beta = args
    return (f"(grad_ready_s={rounded(grad_ready_s, 9)}, param_bytes={list(param_bytes)}, buckets={buckets}, "
            f"world_size={n}, alpha_s={alpha:g}, beta_s_per_byte={beta:g})")


def assert_grads_averaged(result: Sequence[dict[str, Any]], slow: bool) -> None:
    """Every rank's gradients after ``wait()`` equal the mean over ranks of the ones set."""
    note = (" (asynchronous all-reduces here finish only when waited on, as they may on a slow network)"
            if slow else "")
    for it in range(len(result[0]["after"])):
        expected = mean_of([r["before"][it] for r in result])
        for rank, r in enumerate(result):
            diff = first_difference(r["after"][it], expected, atol=1e-5, rtol=1e-5)
            if diff is None:
                continue
            hint = ""
            if first_difference(r["after"][it], r["before"][it], atol=1e-6, rtol=1e-6) is None:
                hint = (" The gradients are still this rank's own: were the results copied out of the buckets "
                        "before waiting on their handles?")
            elif first_difference(r["after"][it], {k: v * len(result) for k, v in expected.items()},
                                  atol=1e-4, rtol=1e-5) is None:
                hint = " They are the sum over ranks: divide by the world size."
            raise AssertionError(
                f"Iteration {it + 1}, rank {rank}: the gradients after wait() are not the mean over ranks "
                f"({diff}){note}.{hint} Launch buckets in bucket order on every rank, give each bucket its own "
                f"buffer and read it only after its handle's wait().")


def assert_backward_averaged(result: Sequence[dict[str, Any]]) -> None:
    """After a real backward and ``wait()``, every rank holds the all-reduced mean gradient."""
    for rank, r in enumerate(result):
        diff = first_difference(r["got"], r["expected"], atol=1e-6, rtol=1e-5)
        if diff is not None:
            raise AssertionError(f"After backward and wait(), rank {rank}'s gradients are not the mean over "
                                 f"ranks ({diff}): do the hooks fire grad_ready for every parameter?")


def assert_bucket_traffic(ledger: Any, buckets: Buckets, param_bytes: Sequence[int], iterations: int) -> None:
    """Each rank issued exactly one all-reduce per bucket, of the bucket's size, in bucket order."""
    expected = [sum(param_bytes[i] for i in b) // 4 for b in buckets] * iterations
    for rank in range(ledger.world_size):
        got = [rec.numel for rec in ledger.records[rank] if rec.op == "all_reduce"]
        if got != expected:
            raise AssertionError(
                f"Rank {rank} issued all-reduces of {got} elements; one all-reduce per bucket, in bucket order, "
                f"gives {expected}.")


def assert_training_like_ddp(result: Sequence[dict[str, Any]], model: nn.Module,
                             batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
    """The student's training equals real DDP (same buckets) and single-process float64 SGD."""
    reference = sgd_reference(model, batches, lr)
    for rank, r in enumerate(result):
        diff = first_difference(r["state"], r["ddp"], atol=1e-5, rtol=1e-4)
        if diff is not None:
            raise AssertionError(
                f"Rank {rank}: after {len(batches)} steps the model differs from real DistributedDataParallel "
                f"with the same buckets ({diff}). Wait for every bucket before optimizer.step(): until wait() "
                f"returns, .grad holds this rank's own gradient.")
        diff = first_difference(r["state"], reference, atol=1e-5, rtol=1e-4)
        if diff is not None:
            raise AssertionError(f"Rank {rank}: the model differs from single-process SGD on the full batch "
                                 f"({diff}).")
