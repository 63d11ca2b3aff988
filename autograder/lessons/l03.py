"""Lesson 03, gradient buckets: the instructor side.

References of the graded functions (DDP's bucket assignment, the alpha-beta schedule and its
tail), the training driver that needs them, the hidden model with rank-dependent ready orders
(:class:`TimedBranches`) and the synchroniser's driver on a subgroup, the hidden checks (the
design exercise's on the gradients and, replayed here, on the modelled clock of
:class:`helpers.l03_gradient_buckets.ClockedNetwork`), and the results stored for the chapter (``STORED``).

Vocabulary as in :mod:`helpers.l03_gradient_buckets`: ``param_bytes[i]`` is parameter ``i``'s gradient
size in bytes (registration order), a bucket is a list of parameter indices, buckets are
listed in launch order; times are seconds, alpha seconds per message, beta seconds per byte.
"""
from __future__ import annotations

import itertools
import sys
from typing import Any, Callable, Sequence

import cloudpickle
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons.costs import ring_allreduce_bytes
from autograder.lessons.l01 import full_batch_gradients, in_subgroup, run_in_subgroup, sgd_reference
from autograder.plain import plain
from helpers import l03_gradient_buckets as buckets
from helpers.l03_gradient_buckets import MB, OVERLAP_TARGET, BackwardTime, Buckets, grad_bytes, timed_block
from helpers.shared.checks import first_difference
from helpers.runtime.cluster import run
from helpers.shared.models import OutOfOrderMLP, TinyMLP, make_regression_batch
from helpers.shared.state import mse, rank_shard, state_of

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
# (The drivers' DDP runs are PyTorch's own, and the grader also compares with its float64 reference.)
KERNEL_SIDE = frozenset({
    "CountedWaits",
    "TimedBranches",
    "synchroniser_on_rank",
    "train_on_rank",
})

Schedule = list[tuple[float, float, float]]
# Ship this module's rank-side code by value: a rank then never imports the autograder package
# (its nbgrader imports cost seconds per rank process, far more on a loaded machine).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------------- references


def _walk(num_params: int, ready_order: Sequence[int] | None) -> list[int]:
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
    for i in _walk(len(param_bytes), ready_order):
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
    order = _walk(len(param_bytes), ready_order)
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


# --------------------------------------------------------------------------- driver


class CountedWaits:
    """Stands in for ``GradBuckets`` in the hidden check of ``train_step``, on a model DDP wraps.

    DDP's reducer has averaged the gradients when backward returns, so ``wait()`` only counts
    its calls (the visible test's ``MarkingBuckets`` checks when it is called).
    """

    def __init__(self) -> None:
        self.calls = 0

    def wait(self) -> None:
        self.calls += 1


def train_on_rank(
    train_step_fn: Callable[..., float],
    model_fn: Callable[[], nn.Module],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
    bucket_cap_bytes: int,
    first_bucket_cap_bytes: int,
) -> dict[str, Any]:
    """Train with the student's ``train_step`` on a model DDP wraps, then with DDP's usual loop.

    The student's step gets ``DDP(model)`` and a :class:`CountedWaits` for ``grad_buckets``:
    DDP's own reducer averages the gradients during backward, so no solution of the exercise
    enters the kernel. Both sides use the same caps (``bucket_cap_mb_list=[first, cap]``).
    Returns the initial state, both final states, the losses and the ``wait()`` calls.
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    caps = [first_bucket_cap_bytes / MB, bucket_cap_bytes / MB]
    model = model_fn()
    init = state_of(model)
    wrapped = DDP(model, bucket_cap_mb_list=caps)
    waits = CountedWaits()
    opt = torch.optim.SGD(wrapped.parameters(), lr=lr)
    losses = []
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        losses.append(train_step_fn(wrapped, opt, waits, xs, ys))
    mine = state_of(model)

    ddp_model = model_fn()
    ddp = DDP(ddp_model, bucket_cap_mb_list=caps)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=lr)
    for x, y in batches:
        xs, ys = rank_shard(x, y)
        ddp_opt.zero_grad(set_to_none=True)
        mse(ddp(xs), ys).backward()
        ddp_opt.step()
    return {"init": init, "state": mine, "ddp": state_of(ddp_model), "losses": losses, "waits": waits.calls}


class TimedBranches(nn.Module):
    """Two stem blocks, ``branches`` parallel blocks whose outputs are added, and two head blocks, the
    last an output block (:func:`helpers.l03_gradient_buckets.timed_block`).

    On odd ranks the branches run in reverse order in forward, and so in the other order in
    backward: the ready order differs between ranks. Outside a process group it runs as rank 0 does.
    """

    def __init__(self, in_features: int = 5, hidden: int = 20, out_features: int = 3, branches: int = 2,
                 block_backward_s: float = 2e-3) -> None:
        super().__init__()
        s = block_backward_s
        self.stem = nn.Sequential(*timed_block(in_features, hidden, s), *timed_block(hidden, hidden, s))
        self.branches = nn.ModuleList(nn.Sequential(*timed_block(hidden, hidden, s)) for _ in range(branches))
        self.head = nn.Sequential(*timed_block(hidden, hidden, s), *timed_block(hidden, out_features, s, output=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        flipped = dist.is_initialized() and dist.get_rank() % 2 == 1
        outputs = [branch(h) for branch in (reversed(self.branches) if flipped else self.branches)]
        return self.head(torch.stack(outputs).sum(0))


def synchroniser_on_rank(grad_buckets_cls: Callable[..., Any], model_fn: Callable[[], nn.Module],
                         batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
                         ranks: Sequence[int] | None) -> list[dict[str, Any]] | None:
    """:func:`helpers.l03_gradient_buckets.clocked_backwards` on the default group (``ranks=None``) or on the members of
    ``new_group(ranks)`` (the others return ``None``)."""
    if ranks is None:
        return buckets.clocked_backwards(grad_buckets_cls, model_fn, batches)
    return in_subgroup(ranks, lambda group: buckets.clocked_backwards(grad_buckets_cls, model_fn, batches, group))


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


# --------------------------------------------------------------------------- results stored for the chapter


CHAPTER_MODELS = {"TinyMLP": (TinyMLP, 8, 4, 160, 128), "OutOfOrderMLP": (OutOfOrderMLP, 6, 3, 256, 128)}
CHAPTER_NETWORK = {"world_size": 8, "alpha_s": 100e-6, "beta_s_per_byte": 1e-10}  # 10 GB/s links
SYNTHETIC_MODEL = {"num_layers": 24, "weight_bytes": 8 * MB, "bias_bytes": 8 * 1024, "layer_backward_s": 3e-3}


def ready_order(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[int]:
    """The order in which one backward of ``model`` produces its gradients (indices, one process)."""
    order: list[int] = []
    for i, p in enumerate(model.parameters()):
        p.register_post_accumulate_grad_hook(lambda _, i=i: order.append(i))
    mse(model(x), y).backward()
    return order


def stored_assignments() -> dict[str, Any]:
    """The chapter's two small models: sizes, ready order, and PyTorch's buckets for the guess and the truth."""
    out = {}
    for name, (model_cls, in_f, out_f, cap, first) in CHAPTER_MODELS.items():
        model = model_cls()
        sizes = grad_bytes(model)
        order = ready_order(model, *make_regression_batch(8, in_f, out_f, seed=0))
        out[name] = {"names": [n for n, _ in model.named_parameters()], "param_bytes": sizes,
                     "bucket_cap_bytes": cap, "first_bucket_cap_bytes": first, "ready_order": order,
                     "guess": torch_bucket_assignment(sizes, cap, first),
                     "on_ready_order": torch_bucket_assignment(sizes, cap, first, order)}
    return out


def tail_by_cap(grad_ready_s: Sequence[float], param_bytes: Sequence[int], world_size: int, alpha_s: float,
                beta_s_per_byte: float, caps: Sequence[int], first_bucket_cap_bytes: int | None) -> list[list]:
    """``[cap_bytes, tail_s, num_buckets]`` for each cap, with DDP's assignment in reverse registration order."""
    rows = []
    for cap in caps:
        bucket_list = assign_buckets(param_bytes, cap, first_bucket_cap_bytes)
        tail = communication_tail(grad_ready_s, param_bytes, bucket_list, world_size, alpha_s, beta_s_per_byte)
        rows.append([cap, tail, len(bucket_list)])
    return rows


def _extreme_tails(grad_ready_s: Sequence[float], param_bytes: Sequence[int], network: dict[str, float]
                   ) -> dict[str, float]:
    """Tails of one bucket per tensor and of a single bucket (seconds)."""
    order = _walk(len(param_bytes), None)
    args = (network["world_size"], network["alpha_s"], network["beta_s_per_byte"])
    return {"per_tensor_tail_s": communication_tail(grad_ready_s, param_bytes, [[i] for i in order], *args),
            "one_bucket_tail_s": communication_tail(grad_ready_s, param_bytes, [order], *args)}


def stored_synthetic() -> dict[str, Any]:
    """§3.2 and §3.4: the 24-layer synthetic model's buckets, timelines and tail against the cap."""
    # imports matplotlib: not at module level, the ranks import l03
    from helpers.l03_gradient_buckets.plots import synthetic_layers
    model = SYNTHETIC_MODEL
    sizes, ready = synthetic_layers(**model)
    net = CHAPTER_NETWORK
    args = (net["world_size"], net["alpha_s"], net["beta_s_per_byte"])
    first, total = dist._DEFAULT_FIRST_BUCKET_BYTES, sum(sizes)
    cases = []
    for label, cap, first_cap in (("one bucket per tensor", 1, None),
                                  ("DDP defaults (25 MiB, first 1 MiB)", 25 * MB, first),
                                  ("one bucket", total, None)):
        bucket_list = assign_buckets(sizes, cap, first_cap)
        cases.append({"label": label, "buckets": bucket_list,
                      "schedule": communication_schedule(ready, sizes, bucket_list, *args),
                      "tail_s": communication_tail(ready, sizes, bucket_list, *args)})
    lo, hi = max(1, min(sizes) // 4), total
    caps = sorted({int(round(lo * (hi / lo) ** (k / 96))) for k in range(97)} | {25 * MB})
    return {"model": model, "network": net, "cases": cases,
            "layer_allreduce_s": allreduce_seconds(model["weight_bytes"] + model["bias_bytes"], *args),
            "gradient_allreduce_s": allreduce_seconds(total, *args),
            "sweep": {"first_bucket_cap_bytes": MB, "rows": tail_by_cap(ready, sizes, *args, caps, MB),
                      **_extreme_tails(ready, sizes, net)}}


EXPLORER_GRID = {
    "caps_bytes": sorted({int(round(2 ** (k / 2))) for k in range(24, 57)} | {25 * MB}),
    "first_caps_bytes": [256 * 1024, MB, 4 * MB, 25 * MB],
    "world_sizes": [2, 8, 64],
    "alphas_s": [1e-5, 1e-4, 1e-3],
    "bandwidths_gb_s": [1, 10, 100],
}


def stored_explorer() -> dict[str, Any]:
    """The explorer of optional section 3.E: tail and first start for every cap, first cap and network of
    :data:`EXPLORER_GRID` (seconds)."""
    from helpers.l03_gradient_buckets.plots import synthetic_layers
    model = SYNTHETIC_MODEL
    sizes, ready = synthetic_layers(**model)
    grid = EXPLORER_GRID
    assignments = [[assign_buckets(sizes, cap, first) for cap in grid["caps_bytes"]]
                   for first in grid["first_caps_bytes"]]
    networks = []
    for n, alpha, bw in itertools.product(grid["world_sizes"], grid["alphas_s"], grid["bandwidths_gb_s"]):
        net = {"world_size": n, "alpha_s": alpha, "beta_s_per_byte": 1 / (bw * 1e9)}
        schedules = [[communication_schedule(ready, sizes, b, n, alpha, net["beta_s_per_byte"]) for b in row]
                     for row in assignments]
        networks.append({"world_size": n, "alpha_s": alpha, "bandwidth_gb_s": bw,
                         "tail_s": [[s[-1][2] - max(ready) for s in row] for row in schedules],
                         "first_start_s": [[s[0][1] for s in row] for row in schedules],
                         **_extreme_tails(ready, sizes, net)})
    return {"model": model, **grid, "num_buckets": [[len(b) for b in row] for row in assignments],
            "networks": networks}


# Only IEEE +, -, *, / and max on Python floats: the stored values are the same on every machine.
STORED = {"03_assignments": stored_assignments, "03_synthetic": stored_synthetic, "03_explorer": stored_explorer}
