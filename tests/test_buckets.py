"""Tests of helpers.buckets (lesson 03): references against PyTorch, the slow network, drivers, checks."""
from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist

from helpers import buckets as B
from helpers.cluster import run
from helpers.ledger import CollectiveRecord, Ledger
from helpers.models import OutOfOrderMLP, TinyMLP, make_regression_batch
from helpers.reference import SameInit, make_batches, uneven_mlp


def test_assignment_matches_pytorch_on_random_cases() -> None:
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 9)
        sizes = [4 * rng.randint(1, 60) for _ in range(n)]
        cap = 4 * rng.randint(1, 100)
        first = rng.choice([None, 4 * rng.randint(1, 60)])
        order = rng.choice([None, rng.sample(range(n), n)])
        assert B.assign_buckets(sizes, cap, first, order) == B.torch_bucket_assignment(sizes, cap, first, order)


def test_assignment_example_from_the_assignment() -> None:
    sizes = [512, 64, 1024, 64, 256, 16]
    assert B.assign_buckets(sizes, 600) == [[5, 4, 3, 2], [1, 0]]
    assert B.assign_buckets(sizes, 600, 300) == [[5, 4, 3], [2], [1, 0]]
    assert B.assign_buckets([400, 200], 600) == [[1, 0]]  # exactly the cap closes the bucket


@pytest.mark.parametrize("model_fn, in_f, out_f", [(SameInit(TinyMLP, seed=1), 8, 4),
                                                   (SameInit(OutOfOrderMLP, seed=2), 6, 3)])
def test_reference_reproduces_real_ddp_rebuilt_buckets(model_fn, in_f: int, out_f: int) -> None:
    x, y = make_regression_batch(8, in_f, out_f, seed=3)
    out = run(lambda: B.ddp_buckets_on_rank(model_fn, x, y, 200, 100), world_size=2, timeout=60)
    assert out[0] == out[1]
    r = out[0]
    assert r["ready_order"] != sorted(r["ready_order"], reverse=True), "the model should not be ready in reverse order"
    assert r["buckets"] == B.assign_buckets(r["param_bytes"], 200, 100, r["ready_order"])
    B.assert_ddp_buckets(B.assign_buckets, r, 200, 100)


def test_schedule_serialises_buckets_and_prices_ring_allreduce() -> None:
    sched = B.communication_schedule([0.0, 1.0, 2.0, 3.0], [400] * 4, [[3, 2], [1, 0]], 4, 1e-3, 1e-3)
    assert sched[0] == pytest.approx((3.0, 3.0, 4.206))
    assert sched[1] == pytest.approx((1.0, 4.206, 5.412))
    assert B.communication_tail([0.0, 1.0, 2.0, 3.0], [400] * 4, [[3, 2], [1, 0]], 4, 1e-3, 1e-3) == pytest.approx(2.412)
    assert B.communication_schedule([0.2, 0.1], [4, 4], [[1], [0]], 1, 1.0, 1.0) == [(0.1, 0.1, 0.1), (0.2, 0.2, 0.2)]
    assert B.allreduce_seconds(1000, 8, 1e-5, 1e-9) == pytest.approx(14e-5 + 1750e-9)


def _off_by_one(sizes, cap, first=None, ready_order=None):
    return B.assign_buckets(sizes, cap + 1, None if first is None else first + 1, ready_order)


def test_checks_name_the_mistakes() -> None:
    with pytest.raises(AssertionError, match="reach the cap"):
        B.assert_buckets(_off_by_one, [([400, 200, 400, 200], 600, None, None)])
    with pytest.raises(AssertionError, match="registration order"):
        B.assert_buckets(lambda s, c, f=None, ready_order=None: B.assign_buckets(s, c, f, list(range(len(s)))),
                         [([400, 200, 400, 200], 600, None, None)])
    case = ([0.1, 0.1, 0.5, 0.45], [4000, 40, 2000, 40], [[3, 2], [1, 0]], 8, 5e-5, 1e-6)
    no_queue = lambda *a: [(r, r, r + f - s) for r, s, f in B.communication_schedule(*a)]  # noqa: E731
    with pytest.raises(AssertionError, match="one after"):
        B.assert_schedule(no_queue, [case])
    enqueue = lambda *a: [(r, s, s) for r, s, f in B.communication_schedule(*a)]  # noqa: E731
    with pytest.raises(AssertionError, match="enqueueing"):
        B.assert_schedule(enqueue, [case])
    with pytest.raises(AssertionError, match="last bucket's start"):
        B.assert_tail(lambda *a: B.communication_schedule(*a)[-1][1] - max(a[0]), [case])
    B.assert_schedule(B.communication_schedule, [case])
    B.assert_tail(B.communication_tail, [case])


def _slow_network_on_rank() -> dict:
    rank = dist.get_rank()
    a, b = torch.full((3,), float(rank + 1)), torch.full((2,), 10.0 * (rank + 1))
    with B.SlowNetwork() as net:
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


def test_reference_grad_buckets_with_rank_dependent_ready_orders() -> None:
    model_fn = SameInit(uneven_mlp, seed=6, kwargs={"in_features": 6, "out_features": 3, "freeze_first": False})
    sizes = [p.numel() * 4 for p in model_fn().parameters()]
    buckets = [[4, 3], [2], [1, 0]]
    orders = [[4, 3, 2, 1, 0], [0, 1, 2, 3, 4], [2, 0, 4, 1, 3]]
    for slow in (True, False):
        out, ledger = run(lambda: B.grad_buckets_on_rank(B.ReferenceGradBuckets, model_fn, buckets, orders, seed=1,
                                                         slow=slow), world_size=3, ledger=True, timeout=30)
        B.assert_grads_averaged(out, slow=slow)
        B.assert_bucket_traffic(ledger, buckets, sizes, iterations=2)
    x, y = make_regression_batch(12, 6, 3, seed=2)
    B.assert_backward_averaged(run(lambda: B.backward_on_rank(B.ReferenceGradBuckets, model_fn, buckets, x, y, True),
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
    out = run(lambda: B.train_on_rank(_reference_train_step, model_fn, batches, 0.1, 160, 100), world_size=2, timeout=60)
    B.assert_training_like_ddp(out, model_fn(), batches, 0.1)


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
