"""Tests of lesson 03: the references (autograder.lessons.l03) against PyTorch, the drivers and checks
(helpers.buckets), the slow network, and the hidden checks' refusal of values that are not plain."""
from __future__ import annotations

import random
import sys
from typing import Any

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from torch import nn

from autograder.lessons import l03
from helpers import buckets as B
from helpers.buckets import Buckets
from helpers.cluster import run
from helpers.ledger import CollectiveRecord, Ledger
from helpers.models import OutOfOrderMLP, TinyMLP, make_regression_batch
from helpers.reference import SameInit, make_batches, uneven_mlp
from helpers.slow_network import SlowNetwork

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # ranks never import this module (nor autograder)


def _random_case(rng: random.Random) -> tuple:
    n = rng.randint(1, 9)
    sizes = [4 * rng.randint(1, 60) for _ in range(n)]
    return sizes, 4 * rng.randint(1, 100), rng.choice([None, 4 * rng.randint(1, 60)]), \
        rng.choice([None, rng.sample(range(n), n)])


def test_assignment_matches_pytorch_and_the_rule_check_on_random_cases() -> None:
    rng = random.Random(0)
    for _ in range(500):
        sizes, cap, first, order = _random_case(rng)
        expected = l03.torch_bucket_assignment(sizes, cap, first, order)
        assert l03.assign_buckets(sizes, cap, first, order) == expected
        assert B.bucket_rule_violation(sizes, cap, first, order, expected) is None
        flat = [i for b in expected for i in b]
        if len(flat) > 1:  # any other split of the same walk breaks the rule
            cut = rng.randint(1, len(flat) - 1)
            other = [flat[:cut], flat[cut:]]
            if other != expected:
                assert B.bucket_rule_violation(sizes, cap, first, order, other) is not None


def test_assignment_example_from_the_assignment() -> None:
    sizes = [512, 64, 1024, 64, 256, 16]
    assert l03.assign_buckets(sizes, 600) == [[5, 4, 3, 2], [1, 0]]
    assert l03.assign_buckets(sizes, 600, 300) == [[5, 4, 3], [2], [1, 0]]
    assert l03.assign_buckets([400, 200], 600) == [[1, 0]]  # exactly the cap closes the bucket


@pytest.mark.parametrize("model_fn, in_f, out_f", [(SameInit(TinyMLP, seed=1), 8, 4),
                                                   (SameInit(OutOfOrderMLP, seed=2), 6, 3)])
def test_reference_reproduces_real_ddp_rebuilt_buckets(model_fn, in_f: int, out_f: int) -> None:
    x, y = make_regression_batch(8, in_f, out_f, seed=3)
    out = run(lambda: B.ddp_buckets_on_rank(model_fn, x, y, 200, 100), world_size=2, timeout=60)
    assert out[0] == out[1]
    r = out[0]
    assert r["ready_order"] != sorted(r["ready_order"], reverse=True), "the model should not be ready in reverse order"
    assert r["ready_order"] == l03.ready_order(model_fn(), x, y), "one process records DDP's ready order"
    assert r["buckets"] == l03.assign_buckets(r["param_bytes"], 200, 100, r["ready_order"])
    l03.assert_ddp_buckets(l03.assign_buckets, r, 200, 100)


def test_schedule_serialises_buckets_and_prices_ring_allreduce() -> None:
    sched = l03.communication_schedule([0.0, 1.0, 2.0, 3.0], [400] * 4, [[3, 2], [1, 0]], 4, 1e-3, 1e-3)
    assert sched[0] == pytest.approx((3.0, 3.0, 4.206))
    assert sched[1] == pytest.approx((1.0, 4.206, 5.412))
    assert l03.communication_tail([0.0, 1.0, 2.0, 3.0], [400] * 4, [[3, 2], [1, 0]], 4, 1e-3, 1e-3) == \
        pytest.approx(2.412)
    assert l03.communication_schedule([0.2, 0.1], [4, 4], [[1], [0]], 1, 1.0, 1.0) == [(0.1, 0.1, 0.1), (0.2, 0.2, 0.2)]
    assert l03.allreduce_seconds(1000, 8, 1e-5, 1e-9) == pytest.approx(14e-5 + 1750e-9)


VISIBLE_SCHEDULE_CASE = ([0.5, 0.4, 0.3, 0.2, 0.1], [40, 8, 400, 8, 40], [[4, 3], [2, 1, 0]], 2, 1e-4, 1e-3)


def test_visible_literals_are_the_reference() -> None:
    """The values the visible tests write by hand are what the references compute."""
    B.assert_schedule(l03.communication_schedule, VISIBLE_SCHEDULE_CASE, [(0.2, 0.2, 0.2482), (0.5, 0.5, 0.9482)])
    B.assert_tail(l03.communication_tail, VISIBLE_SCHEDULE_CASE, [(0.2, 0.2, 0.2482), (0.5, 0.5, 0.9482)])
    sizes = B.grad_bytes(SameInit(TinyMLP, seed=1)())
    assert sizes == [512, 64, 64, 64, 256, 16]
    for sizes, cap, first, order in [([512, 64, 1024, 64, 256, 16], 600, 300, None),
                                     ([120, 12, 240, 40, 400], 200, 120, [1, 0, 4, 3, 2])]:
        B.assert_buckets(l03.assign_buckets, [(sizes, cap, first, order)])


def _off_by_one(sizes, cap, first=None, ready_order=None):
    return l03.assign_buckets(sizes, cap + 1, None if first is None else first + 1, ready_order)


@pytest.mark.parametrize("assert_buckets", [B.assert_buckets, l03.assert_buckets])
def test_bucket_checks_name_the_mistakes(assert_buckets) -> None:
    with pytest.raises(AssertionError, match="reach the cap"):
        assert_buckets(_off_by_one, [([400, 200, 400, 200], 600, None, None)])
    with pytest.raises(AssertionError, match="registration order"):
        assert_buckets(lambda s, c, f=None, ready_order=None: l03.assign_buckets(s, c, f, list(range(len(s)))),
                       [([400, 200, 400, 200], 600, None, None)])
    with pytest.raises(AssertionError, match="own, smaller cap"):
        assert_buckets(lambda s, c, f=None, ready_order=None: l03.assign_buckets(s, c, None, ready_order),
                       [([40, 40, 40, 40], 80, 40, None)])
    with pytest.raises(AssertionError, match="overshoot"):
        assert_buckets(lambda s, c, f=None, ready_order=None: [[3], [2], [1], [0]],
                       [([400, 200, 400, 200], 600, None, None)])
    with pytest.raises(AssertionError, match="exactly one bucket"):
        assert_buckets(lambda s, c, f=None, ready_order=None: [[3, 2, 1]], [([400, 200, 400, 200], 600, None, None)])
    assert_buckets(l03.assign_buckets, [([400, 200, 400, 200], 600, None, None),
                                        ([40, 40, 40, 40], 80, 40, [0, 1, 2, 3])])


def test_schedule_and_tail_checks_name_the_mistakes() -> None:
    case = ([0.1, 0.1, 0.5, 0.45], [4000, 40, 2000, 40], [[3, 2], [1, 0]], 8, 5e-5, 1e-6)
    expected = l03.communication_schedule(*case)
    no_queue = lambda *a: [(r, r, r + f - s) for r, s, f in l03.communication_schedule(*a)]  # noqa: E731
    enqueue = lambda *a: [(r, s, s) for r, s, f in l03.communication_schedule(*a)]  # noqa: E731
    for check in (lambda fn: B.assert_schedule(fn, case, expected), lambda fn: l03.assert_schedule(fn, [case])):
        with pytest.raises(AssertionError, match="one after"):
            check(no_queue)
        with pytest.raises(AssertionError, match="enqueueing"):
            check(enqueue)
        check(l03.communication_schedule)
    last_start = lambda *a: l03.communication_schedule(*a)[-1][1] - max(a[0])  # noqa: E731
    with pytest.raises(AssertionError, match="last bucket's start"):
        B.assert_tail(last_start, case, expected)
    with pytest.raises(AssertionError, match="last bucket's start"):
        l03.assert_tail(last_start, [case])
    B.assert_tail(l03.communication_tail, case, expected)
    l03.assert_tail(l03.communication_tail, [case])


class _AlwaysEqual(list):
    def __eq__(self, other: object) -> bool:
        return True


class _Float(float):
    pass


def test_hidden_checks_accept_only_plain_values() -> None:
    case = ([400, 200, 400, 200], 600, None, None)
    with pytest.raises(AssertionError, match="plain data"):
        l03.assert_buckets(lambda *a, **k: _AlwaysEqual(), [case])
    sched_case = VISIBLE_SCHEDULE_CASE
    with pytest.raises(AssertionError, match="plain data"):
        l03.assert_tail(lambda *a: _Float(l03.communication_tail(*a)), [sched_case])
    with pytest.raises(AssertionError, match="plain data"):
        l03.assert_schedule(lambda *a: [tuple(map(_Float, t)) for t in l03.communication_schedule(*a)], [sched_case])


def _slow_network_on_rank() -> dict:
    rank = dist.get_rank()
    a, b = torch.full((3,), float(rank + 1)), torch.full((2,), 10.0 * (rank + 1))
    with SlowNetwork() as net:
        ha = dist.all_reduce(a, async_op=True)
        hb = dist.all_reduce(b, async_op=True)
        untouched = a.tolist(), b.tolist(), ha.is_completed()
        future = ha.get_future()
        hb.wait()  # waiting on the later handle completes the earlier one too (launch order)
        after_wait = a.tolist(), b.tolist(), ha.is_completed() and future.wait()[0] is a
        c = torch.ones(1)
        hc = dist.all_reduce(c, async_op=True)
        d = torch.ones(1)
        dist.all_reduce(d)  # a blocking collective runs what was queued before it
        queued_then_blocking = c.item(), d.item(), hc.is_completed(), net.done
    return {"untouched": untouched, "after_wait": after_wait, "blocking": queued_then_blocking,
            "restored": dist.all_reduce is net.original}


def test_slow_network_completes_async_all_reduces_only_when_it_must() -> None:
    out, ledger = run(_slow_network_on_rank, world_size=2, ledger=True, timeout=30)
    for rank, r in enumerate(out):
        assert r["untouched"] == ([rank + 1.0] * 3, [10.0 * (rank + 1)] * 2, False)
        assert r["after_wait"] == ([3.0] * 3, [30.0] * 2, True)
        assert r["blocking"] == (2.0, 2.0, True, 3)
        assert r["restored"]
    assert [rec.numel for rec in ledger.records[0]] == [3, 2, 1, 1]


def _own_wait_network_on_rank() -> dict:
    rank = dist.get_rank()
    a, b, c = (torch.full((2,), (rank + 1) * k) for k in (1.0, 10.0, 100.0))
    with l03.OwnWaitNetwork() as net:
        ha, hb, hc = (dist.all_reduce(t, async_op=True) for t in (a, b, c))
        launched = len(net.queue), net.done
        hc.wait()  # runs all three in launch order, but only c's result lands
        after_last = a[0].item(), b[0].item(), c[0].item(), ha.is_completed(), hc.is_completed(), net.done
        ha.wait()
        hb.wait()
        after_all = a[0].item(), b[0].item()
        dist.all_reduce(torch.ones(1))
    return {"launched": launched, "after_last": after_last, "after_all": after_all, "blocking": net.blocking}


def test_own_wait_network_completes_a_collective_only_on_its_own_wait() -> None:
    out = run(_own_wait_network_on_rank, world_size=2, timeout=30)
    for rank, r in enumerate(out):
        assert r["launched"] == (3, 0)
        assert r["after_last"] == (rank + 1.0, 10.0 * (rank + 1), 300.0, False, True, 3)
        assert r["after_all"] == (3.0, 30.0)
        assert r["blocking"] == 1


class ReferenceGradBuckets:
    """A correct ``GradBuckets`` (the exercise's contract), for testing the checks; never shipped to a kernel.

    ``grad_ready(i)`` marks parameter ``i`` ready and launches, in bucket order, every
    complete bucket whose predecessors are launched: its gradients are copied into a new
    flat buffer and ``dist.all_reduce(buffer, async_op=True)`` is called. ``wait()`` waits
    on each handle in launch order, copies ``buffer / N`` back into the ``.grad`` tensors and
    resets for the next iteration.
    """

    def __init__(self, model: nn.Module, bucket_list: Buckets, group: Any = None) -> None:
        self.params = list(model.parameters())
        self.buckets = [list(b) for b in bucket_list]
        self.group = group
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
            buffer = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[len(self.pending)]])
            self.pending.append((dist.all_reduce(buffer, group=self.group, async_op=True), buffer))

    def wait(self) -> None:
        if len(self.pending) != len(self.buckets):
            raise RuntimeError(f"only {len(self.pending)} of {len(self.buckets)} buckets were launched: "
                               "some gradients were never produced")
        n = dist.get_world_size(self.group)
        for bucket, (handle, buffer) in zip(self.buckets, self.pending):
            handle.wait()
            offset = 0
            for i in bucket:
                grad = self.params[i].grad
                grad.copy_(buffer[offset: offset + grad.numel()].view_as(grad) / n)
                offset += grad.numel()
        self._reset()


def test_backwards_check_accepts_the_reference_on_a_subgroup() -> None:
    model_fn = SameInit(uneven_mlp, seed=6, kwargs={"in_features": 6, "out_features": 3, "freeze_first": False})
    l03.check_backwards(ReferenceGradBuckets, model_fn, [[4, 3], [2], [1, 0]], make_batches(2, 12, 6, 3, seed=1),
                        ranks=[0, 2, 3])


def test_reference_grad_buckets_with_rank_dependent_ready_orders() -> None:
    model_fn = SameInit(uneven_mlp, seed=6, kwargs={"in_features": 6, "out_features": 3, "freeze_first": False})
    sizes = [p.numel() * 4 for p in model_fn().parameters()]
    bucket_list = [[4, 3], [2], [1, 0]]
    orders = [[4, 3, 2, 1, 0], [0, 1, 2, 3, 4], [2, 0, 4, 1, 3]]
    reference = ReferenceGradBuckets
    for slow in (True, False):
        out, ledger = run(lambda: B.grad_buckets_on_rank(reference, model_fn, bucket_list, orders, seed=1, slow=slow),
                          world_size=3, ledger=True, timeout=30)
        l03.assert_grads_averaged(out, slow=slow)
        B.assert_bucket_traffic(ledger, bucket_list, sizes, iterations=2)
    x, y = make_regression_batch(12, 6, 3, seed=2)
    l03.assert_backward_averaged(run(lambda: B.backward_on_rank(reference, model_fn, bucket_list, x, y, True),
                                     world_size=3, timeout=30))


def _reference_train_step(model, optimizer, grad_buckets, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    grad_buckets.wait()
    optimizer.step()
    return loss.item()


def test_training_driver_agrees_with_ddp_and_sgd() -> None:
    model_fn = SameInit(OutOfOrderMLP, seed=3)
    batches = make_batches(3, 6, 6, 3, seed=4)
    l03.check_train_step(_reference_train_step, model_fn, batches, 0.1, 2, 160, 100)


def _step_before_wait(model, optimizer, grad_buckets, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    grad_buckets.wait()
    return loss.item()


def _no_wait(model, optimizer, grad_buckets, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def _zero_grad_after_wait(model, optimizer, grad_buckets, x, y) -> float:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    grad_buckets.wait()
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    return loss.item()


def _never_cleared(model, optimizer, grad_buckets, x, y) -> float:
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    grad_buckets.wait()
    optimizer.step()
    return loss.item()


@pytest.mark.parametrize("step, message", [(_step_before_wait, "ran before"), (_no_wait, "called 0 time"),
                                           (_zero_grad_after_wait, "did not move at all"),
                                           (_never_cleared, "had not been cleared"),
                                           (lambda *a: torch.tensor(_reference_train_step(*a)), "Python float")])
def test_train_step_check_names_the_mistakes(step, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        B.assert_train_step(step, SameInit(TinyMLP, seed=21)(), make_batches(3, 8, 8, 4, seed=22), lr=0.1)


def test_train_step_check_accepts_the_reference() -> None:
    B.assert_train_step(_reference_train_step, SameInit(TinyMLP, seed=21)(), make_batches(3, 8, 8, 4, seed=22), 0.1)


def _fake_averaging_results(copy_before_wait: bool) -> list[dict]:
    before = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
    mean = {"w": torch.tensor([2.0, 4.0])}
    return [{"before": [b], "after": [b if copy_before_wait else mean]} for b in before]


def test_averaging_check_recognises_reading_before_wait() -> None:
    B.assert_grads_averaged(_fake_averaging_results(False), slow=True)
    with pytest.raises(AssertionError, match="before waiting"):
        B.assert_grads_averaged(_fake_averaging_results(True), slow=True)


def test_traffic_check_counts_all_reduces_per_bucket() -> None:
    rec = lambda i, n: CollectiveRecord(i, "all_reduce", "float32", (n,), n, (0, 1), 0.0, "SUM")  # noqa: E731
    good = Ledger([[rec(0, 2), rec(1, 3)], [rec(0, 2), rec(1, 3)]])
    B.assert_bucket_traffic(good, [[1], [0]], [12, 8], iterations=1)
    with pytest.raises(AssertionError, match="one all-reduce per bucket"):
        B.assert_bucket_traffic(Ledger([[rec(0, 5)], [rec(0, 5)]]), [[1], [0]], [12, 8], iterations=1)


def test_stored_results_for_the_chapter() -> None:
    synthetic = l03.stored_synthetic()
    sizes = [c["buckets"] for c in synthetic["cases"]]
    assert [len(b) for b in sizes] == [48, 7, 1]
    rows = synthetic["sweep"]["rows"]
    assert [c for c, _, _ in rows] == sorted(c for c, _, _ in rows) and 25 * 2**20 in [c for c, _, _ in rows]
    grid = l03.stored_explorer()
    assert len(grid["networks"]) == 27 and all(len(net["tail_s"]) == len(grid["first_caps_bytes"])
                                               for net in grid["networks"])
    default = next(n for n in grid["networks"] if (n["world_size"], n["alpha_s"], n["bandwidth_gb_s"]) == (8, 1e-4, 10))
    f, c = grid["first_caps_bytes"].index(2**20), grid["caps_bytes"].index(25 * 2**20)
    assert default["tail_s"][f][c] == pytest.approx(synthetic["cases"][1]["tail_s"])


@pytest.mark.parametrize("step, message", [(_reference_train_step, None), (_step_before_wait, "ran before"),
                                           (_no_wait, "called 0 time"),
                                           (_zero_grad_after_wait, "did not move at all"),
                                           (_never_cleared, "had not been cleared"),
                                           (lambda *a: torch.tensor(_reference_train_step(*a)), "Python float")])
def test_train_step_check_works_from_the_grader(graded, step, message) -> None:
    """The visible check runs the steps where the notebook's code is and decides on the records."""
    model = SameInit(TinyMLP, seed=21)()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    args = (graded("train_step", step), model, make_batches(3, 8, 8, 4, seed=22), 0.1)
    if message is None:
        B.assert_train_step(*args)
    else:
        with pytest.raises(AssertionError, match=message):
            B.assert_train_step(*args)
    assert all(torch.equal(v, initial[k]) for k, v in model.state_dict().items())  # the steps ran on a copy


def test_hidden_train_step_check_works_from_the_grader(graded) -> None:
    batches = make_batches(3, 6, 6, 3, seed=4)
    l03.check_train_step(graded("train_step", _reference_train_step), SameInit(OutOfOrderMLP, seed=3), batches,
                         0.1, 2, 160, 100)
    with pytest.raises(AssertionError, match="differs from real DistributedDataParallel"):
        l03.check_train_step(graded("train_step", _never_cleared), SameInit(OutOfOrderMLP, seed=3), batches,
                             0.1, 2, 160, 100)
    with pytest.raises(AssertionError, match="wait\\(\\) 0 time"):
        l03.check_train_step(graded("train_step", _no_wait), SameInit(OutOfOrderMLP, seed=3), batches,
                             0.1, 2, 160, 100)
