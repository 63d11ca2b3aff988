"""Lesson 03, gradient buckets: the references and the hidden checks (private to the grader).

References of the graded functions (DDP's bucket assignment, the alpha-beta schedule and its
tail) and the hidden checks: the design exercise's on the gradients and, replayed here, on the
modelled clock of :class:`helpers.l03_gradient_buckets.ClockedNetwork`. They run the drivers of
:mod:`autograder.lessons.l03.drivers` on the ranks.

Vocabulary as in :mod:`helpers.l03_gradient_buckets`: ``param_bytes[i]`` is parameter ``i``'s gradient
size in bytes (registration order), a bucket is a list of parameter indices, buckets are
listed in launch order; times are seconds, alpha seconds per message, beta seconds per byte.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.costs import ring_allreduce_bytes
from autograder.lessons.l01 import full_batch_gradients, run_in_subgroup, sgd_reference
from autograder.lessons.l03.drivers import synchroniser_on_rank, train_on_rank
from autograder.plain import plain
from helpers import l03_gradient_buckets as buckets
from helpers.l03_gradient_buckets import OVERLAP_TARGET, BackwardTime, Buckets
from helpers.shared.checks import first_difference
from helpers.runtime.cluster import run

Schedule = list[tuple[float, float, float]]


# --------------------------------------------------------------------------- references


def walk(num_params: int, ready_order: Sequence[int] | None) -> list[int]:
    return list(reversed(range(num_params))) if ready_order is None else list(ready_order)


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
    cap = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
    result: Buckets = []
    current: list[int] = []
    size = 0
    for i in walk(len(param_bytes), ready_order):
        current.append(i)
        size += param_bytes[i]
        if size >= cap:
            result.append(current)
            current, size, cap = [], 0, bucket_cap_bytes
    if current:
        result.append(current)
    return result


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
    order = walk(len(param_bytes), ready_order)
    if any(b % 4 for b in param_bytes):
        raise ValueError("param_bytes must be multiples of 4 (float32 gradients)")
    tensors = [torch.empty(param_bytes[i] // 4) for i in order]
    first = bucket_cap_bytes if first_bucket_cap_bytes is None else first_bucket_cap_bytes
    limits = [first, bucket_cap_bytes] if first != bucket_cap_bytes else [bucket_cap_bytes]
    result, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(order), order)
    return [list(b) for b in result]


def allreduce_seconds(message_bytes: float, world_size: int, alpha_s: float, beta_s_per_byte: float) -> float:
    """Alpha-beta time of one ring all-reduce: ``2(N-1) alpha + 2(N-1)/N * bytes * beta``."""
    if world_size == 1:
        return 0.0
    return 2 * (world_size - 1) * alpha_s + ring_allreduce_bytes(int(message_bytes), 1, world_size) * beta_s_per_byte


def communication_schedule(
    grad_ready_s: Sequence[float],
    param_bytes: Sequence[int],
    bucket_list: Buckets,
    world_size: int,
    alpha_s: float,
    beta_s_per_byte: float,
) -> Schedule:
    """``(ready, start, finish)`` in seconds of each bucket's all-reduce, in bucket order.

    A bucket is ready when its *last* gradient is (``max``); all-reduces run one at a
    time in bucket order, so a bucket starts at ``max(ready, previous finish)``; it lasts
    :func:`allreduce_seconds` of its bytes.
    """
    out: Schedule = []
    previous_finish = float("-inf")
    for bucket in bucket_list:
        ready = max(grad_ready_s[i] for i in bucket)
        start = max(ready, previous_finish)
        finish = start + allreduce_seconds(sum(param_bytes[i] for i in bucket), world_size, alpha_s, beta_s_per_byte)
        out.append((ready, start, finish))
        previous_finish = finish
    return out


def communication_tail(
    grad_ready_s: Sequence[float],
    param_bytes: Sequence[int],
    bucket_list: Buckets,
    world_size: int,
    alpha_s: float,
    beta_s_per_byte: float,
) -> float:
    """Seconds from the last gradient being ready to the last all-reduce finishing."""
    schedule = communication_schedule(grad_ready_s, param_bytes, bucket_list, world_size, alpha_s, beta_s_per_byte)
    return schedule[-1][2] - max(grad_ready_s)


# --------------------------------------------------------------------------- hidden checks


def _as_buckets(got: Any) -> Any:
    """Plain ``got``, with tuples of tuples read as lists of lists (the contract's shape)."""
    got = plain(got, "the returned buckets")
    if isinstance(got, (list, tuple)) and all(isinstance(b, (list, tuple)) for b in got):
        return [list(b) for b in got]
    return got


def check_buckets(fn: Callable[..., Any], cases: Sequence[tuple]) -> None:
    """``fn`` agrees with PyTorch's ``_compute_bucket_assignment_by_size`` on every case.

    A case is ``(param_bytes, cap, first_cap or None, ready_order or None)``.
    """
    for param_bytes, cap, first, order in cases:
        got = _as_buckets(buckets.call_assign_buckets(fn, param_bytes, cap, first, order))
        message = buckets.bucket_mismatch(param_bytes, cap, first, order, got,
                                          torch_bucket_assignment(param_bytes, cap, first, order))
        if message:
            raise AssertionError(message)


def check_ddp_buckets(fn: Callable[..., Any], result: dict[str, Any], cap: int, first: int) -> None:
    """``fn`` reproduces the buckets a real DDP rebuilt from the ready order it recorded."""
    result = plain(result, "the DDP run's result")
    got = _as_buckets(fn(result["param_bytes"], cap, first, ready_order=result["ready_order"]))
    message = buckets.bucket_mismatch(result["param_bytes"], cap, first, result["ready_order"], got,
                                      result["buckets"], "the buckets a real DistributedDataParallel rebuilt "
                                      "from the ready order it recorded")
    if message:
        raise AssertionError(message)


def check_schedule(fn: Callable[..., Any], cases: Sequence[tuple]) -> None:
    """``fn`` returns the reference ``(ready, start, finish)`` triples on every case."""
    for args in cases:
        message = buckets.schedule_mismatch(args, plain(fn(*args), "the returned schedule"),
                                            communication_schedule(*args))
        if message:
            raise AssertionError(message)


def check_tail(fn: Callable[..., Any], cases: Sequence[tuple]) -> None:
    """``fn`` returns :func:`communication_tail` on every case."""
    for args in cases:
        message = buckets.tail_mismatch(args, plain(fn(*args), "the returned tail"), communication_schedule(*args))
        if message:
            raise AssertionError(message)


def _synchroniser_runs(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                       batches: Sequence[tuple[torch.Tensor, torch.Tensor]], world_size: int,
                       ranks: Sequence[int] | None) -> tuple[list[list[dict[str, Any]]], str]:
    """The group members' :func:`synchroniser_on_rank` results (plain data) and a label of the run."""
    if ranks is None:
        out = run(synchroniser_on_rank, grad_buckets_cls, model_fn, batches, None, world_size=world_size, timeout=60)
        return plain(out, "the ranks' results"), f"{world_size} ranks"
    out = run_in_subgroup(synchroniser_on_rank, grad_buckets_cls, model_fn, batches, list(ranks), ranks=ranks,
                          what="GradBuckets(model, group)")
    return plain([out[r] for r in ranks], "the ranks' results"), f"group {list(ranks)} of {world_size} ranks"


def check_synchroniser(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                       batches: Sequence[tuple[torch.Tensor, torch.Tensor]], world_size: int,
                       ranks: Sequence[int] | None = None) -> list[list[dict[str, Any]]]:
    """One object, several backwards (on ``new_group(ranks)`` of ``world_size`` ranks if ``ranks`` is given):
    after each ``wait()`` every ``.grad`` is the float64 full-batch gradient (the group mean, what DDP
    computes), and every collective went through ``dist.all_reduce``. Returns the members' runs."""
    runs, where = _synchroniser_runs(grad_buckets_cls, model_fn, batches, world_size, ranks)
    model = model_fn()
    expected = [full_batch_gradients(model, x, y) for x, y in batches]
    message = buckets.synchroniser_mistake(runs, expected, where)
    if message:
        raise AssertionError(message)
    return runs


def check_overlap(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                  batches: Sequence[tuple[torch.Tensor, torch.Tensor]], world_size: int,
                  ranks: Sequence[int] | None = None) -> None:
    """:func:`check_synchroniser`, then on the modelled clock every backward exposes at most
    ``OVERLAP_TARGET`` of one all-reduce of the whole gradient, on the network
    :func:`helpers.l03_gradient_buckets.modelled_network` gives for the model and group size."""
    runs = check_synchroniser(grad_buckets_cls, model_fn, batches, world_size, ranks)
    model, n = model_fn(), len(runs)
    network = buckets.modelled_network(model, n)
    baseline = buckets.baseline_seconds(model, n, *network)
    compute = sorted(m.seconds for m in model.modules() if isinstance(m, BackwardTime))
    where = f"{n} ranks" if ranks is None else f"group {list(ranks)} of {world_size} ranks"
    for it in range(len(batches)):
        logs = [member[it]["log"] for member in runs]
        if any(sorted(entry[1] for entry in log if entry[0] == "compute") != compute for log in logs):
            raise AssertionError(f"[{where}, backward {it + 1}] the model's backward did not take the modelled "
                                 f"times of its blocks: leave the model's modules as they are.")
        fraction, text = buckets.overlap_report(logs, n, *network, baseline)
        if fraction > OVERLAP_TARGET:
            raise AssertionError(f"[{where}, backward {it + 1} of {len(batches)}] {text} The target is at most "
                                 f"{OVERLAP_TARGET} of the baseline.")


def check_train_step(train_step_fn: Callable[..., float], model_fn: Callable[[], nn.Module],
                     batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float, world_size: int,
                     bucket_cap_bytes: int, first_bucket_cap_bytes: int) -> None:
    """Hidden check of ``train_step``: :func:`train_on_rank` on a gloo group, then :func:`assert_training_like_ddp`."""
    out = run(train_on_rank, train_step_fn, model_fn, batches, lr, bucket_cap_bytes, first_bucket_cap_bytes,
              world_size=world_size, timeout=60)
    assert_training_like_ddp(out, model_fn(), batches, lr)


def assert_training_like_ddp(result: Sequence[dict[str, Any]], model: nn.Module,
                             batches: Sequence[tuple[torch.Tensor, torch.Tensor]], lr: float) -> None:
    """The student's training equals real DDP (same buckets) and single-process float64 SGD."""
    result = plain(result, "the training results")
    reference = sgd_reference(model, batches, lr)
    for rank, r in enumerate(result):
        if not all(type(loss) is float for loss in r["losses"]):
            raise AssertionError(f"Rank {rank}: train_step returned {r['losses']!r}; return the loss as a Python "
                                 f"float (loss.item()).")
        if r["waits"] != len(batches):
            raise AssertionError(f"Rank {rank}: {len(batches)} calls of train_step called grad_buckets.wait() "
                                 f"{r['waits']} time(s); call it once per step.")
        diff = first_difference(r["state"], r["ddp"], atol=1e-5, rtol=1e-4)
        if diff is not None:
            raise AssertionError(
                f"Rank {rank}: after {len(batches)} steps the model differs from real DistributedDataParallel "
                f"trained with the usual loop ({diff}): clear the gradients, run forward and backward, wait, "
                f"then step, once per batch.")
        diff = first_difference(r["state"], reference, atol=1e-5, rtol=1e-4)
        if diff is not None:
            raise AssertionError(f"Rank {rank}: the model differs from single-process SGD on the full batch "
                                 f"({diff}).")
