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
code the way its contract says.
"""
from __future__ import annotations

import copy
from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from helpers import remote
from helpers.checks import first_difference, rounded
from helpers.reference import mean_of, mse, rank_shard, set_rank_gradients
from helpers.slow_network import SlowNetwork

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


# --------------------------------------------------------------------------- exercise 4: GradBuckets drivers


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

    Returns the gradients after ``wait`` and, as the expected values, the gradients a real
    ``DistributedDataParallel`` of the same model computes on the same shards (run after the
    student's all-reduces).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = model_fn()
    obj = grad_buckets_cls(model, buckets)
    xs, ys = rank_shard(x, y)
    with SlowNetwork() if slow else nullcontext():
        mse(model(xs), ys).backward()
        obj.wait()
    got = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    ddp = DDP(model_fn())
    mse(ddp(xs), ys).backward()
    return {"got": got, "expected": {n: p.grad.detach().clone() for n, p in ddp.module.named_parameters()}}


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
    """After a real backward and ``wait()``, every rank holds the gradients real DDP computes."""
    for rank, r in enumerate(result):
        diff = first_difference(r["got"], r["expected"], atol=1e-6, rtol=1e-5)
        if diff is not None:
            raise AssertionError(f"After backward and wait(), rank {rank}'s gradients differ from the mean over "
                                 f"ranks that DistributedDataParallel computes ({diff}): do the hooks fire "
                                 f"grad_ready for every parameter?")


def assert_bucket_traffic(ledger: Any, buckets: Buckets, param_bytes: Sequence[int], iterations: int) -> None:
    """Each rank issued exactly one all-reduce per bucket, of the bucket's size, in bucket order."""
    expected = [sum(param_bytes[i] for i in b) // 4 for b in buckets] * iterations
    for rank in range(ledger.world_size):
        got = [rec.numel for rec in ledger.records[rank] if rec.op == "all_reduce"]
        if got != expected:
            raise AssertionError(
                f"Rank {rank} issued all-reduces of {got} elements; one all-reduce per bucket, in bucket order, "
                f"gives {expected}.")


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

    Runs where the notebook's code lives (:func:`helpers.remote.call`), so that the model,
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
