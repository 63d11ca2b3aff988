"""Tests of lesson 03: the references (autograder.lessons.l03) against PyTorch, the drivers and checks
(helpers.l03_gradient_buckets), the slow network, and the hidden checks' refusal of values that are not plain."""
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
from helpers import l03_gradient_buckets as B
from helpers.l03_gradient_buckets import Buckets
from helpers.runtime import hooks
from helpers.runtime.cluster import run
from helpers.shared.models import OutOfOrderMLP, TinyMLP, make_regression_batch
from helpers.shared.state import SameInit, make_batches, mse
from helpers.runtime.slow_network import SlowNetwork

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
    l03.check_ddp_buckets(l03.assign_buckets, r, 200, 100)


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


@pytest.mark.parametrize("assert_buckets", [B.assert_buckets, l03.check_buckets])
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
    for check in (lambda fn: B.assert_schedule(fn, case, expected), lambda fn: l03.check_schedule(fn, [case])):
        with pytest.raises(AssertionError, match="one after"):
            check(no_queue)
        with pytest.raises(AssertionError, match="enqueueing"):
            check(enqueue)
        check(l03.communication_schedule)
    last_start = lambda *a: l03.communication_schedule(*a)[-1][1] - max(a[0])  # noqa: E731
    with pytest.raises(AssertionError, match="last bucket's start"):
        B.assert_tail(last_start, case, expected)
    with pytest.raises(AssertionError, match="last bucket's start"):
        l03.check_tail(last_start, [case])
    B.assert_tail(l03.communication_tail, case, expected)
    l03.check_tail(l03.communication_tail, [case])


class _AlwaysEqual(list):
    def __eq__(self, other: object) -> bool:
        return True


class _Float(float):
    pass


def test_hidden_checks_accept_only_plain_values() -> None:
    case = ([400, 200, 400, 200], 600, None, None)
    with pytest.raises(AssertionError, match="plain data"):
        l03.check_buckets(lambda *a, **k: _AlwaysEqual(), [case])
    sched_case = VISIBLE_SCHEDULE_CASE
    with pytest.raises(AssertionError, match="plain data"):
        l03.check_tail(lambda *a: _Float(l03.communication_tail(*a)), [sched_case])
    with pytest.raises(AssertionError, match="plain data"):
        l03.check_schedule(lambda *a: [tuple(map(_Float, t)) for t in l03.communication_schedule(*a)], [sched_case])


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
            "restored": hooks.intercepted() == ()}


def test_slow_network_completes_async_all_reduces_only_when_it_must() -> None:
    out, ledger = run(_slow_network_on_rank, world_size=2, ledger=True, timeout=30)
    for rank, r in enumerate(out):
        assert r["untouched"] == ([rank + 1.0] * 3, [10.0 * (rank + 1)] * 2, False)
        assert r["after_wait"] == ([3.0] * 3, [30.0] * 2, True)
        assert r["blocking"] == (2.0, 2.0, True, 3)
        assert r["restored"]
    assert [rec.numel for rec in ledger.records[0]] == [3, 2, 1, 1]


def _clocked_network_on_rank() -> dict:
    rank = dist.get_rank()
    a, b, c = (torch.full((2,), (rank + 1) * k) for k in (1.0, 10.0, 100.0))
    with B.ClockedNetwork(nn.Linear(1, 1)) as net:
        ha, hb, hc = (dist.all_reduce(t, async_op=True) for t in (a, b, c))
        launched = len(net.queue), net.done
        hc.wait()  # runs all three in launch order, but only c's result lands
        after_last = a[0].item(), b[0].item(), c[0].item(), ha.is_completed(), hc.is_completed(), net.done
        ha.wait()
        hb.wait()
        after_all = a[0].item(), b[0].item()
        dist.all_reduce(torch.ones(1))
    return {"launched": launched, "after_last": after_last, "after_all": after_all, "log": net.log}


def test_clocked_network_completes_a_collective_only_on_its_own_wait_and_logs_it() -> None:
    out = run(_clocked_network_on_rank, world_size=2, timeout=30)
    for rank, r in enumerate(out):
        assert r["launched"] == (3, 0)
        assert r["after_last"] == (rank + 1.0, 10.0 * (rank + 1), 300.0, False, True, 3)
        assert r["after_all"] == (3.0, 30.0)
        assert r["log"] == [("launch", "all_reduce", 8, 0), ("launch", "all_reduce", 8, 1),
                            ("launch", "all_reduce", 8, 2), ("wait", 2), ("wait", 0), ("wait", 1),
                            ("launch", "all_reduce", 4, 3), ("wait", 3)]


def _timed_backward_on_rank() -> list:
    model = B.TimedMLP((2, 3, 2), block_backward_s=0.5)
    with B.ClockedNetwork(model) as net:
        for i, p in enumerate(model.parameters()):
            p.register_post_accumulate_grad_hook(lambda p, i=i: net.log.append(("ready", i)))
        mse(model(torch.ones(4, 2)), torch.zeros(4, 2)).backward()
    return net.log


def test_a_block_takes_its_backward_time_before_its_gradients_are_ready() -> None:
    log = run(_timed_backward_on_rank, world_size=1, timeout=30)[0]
    assert log[0] == ("compute", 0.5) and log[3] == ("compute", 0.5)   # the output block, then the first block
    assert sorted(i for _, i in log[1:3]) == [4, 5] and sorted(i for _, i in log[4:]) == [0, 1, 2, 3]


def test_replay_runs_one_channel_in_launch_order_and_starts_when_every_rank_launched() -> None:
    # 2 ranks: T(m) = 2 alpha + m beta = 1 s + m * 0.01 s
    rank0 = [("compute", 1.0), ("launch", "all_reduce", 100, 0), ("compute", 1.0), ("launch", "all_reduce", 100, 1),
             ("backward_end",), ("wait", 0), ("wait", 1)]
    rank1 = [("compute", 1.0), ("compute", 1.0), ("launch", "all_reduce", 100, 0), ("launch", "all_reduce", 100, 1),
             ("backward_end",), ("wait", 1), ("wait", 0)]
    clock = B.replay([rank0, rank1], 2, 0.5, 0.01)
    assert clock["messages"] == [(100, 2.0, 4.0), (100, 4.0, 6.0)]  # the first waits for rank 1's launch
    assert [r["exposed_s"] for r in clock["ranks"]] == [4.0, 4.0]
    assert [r["launched_in_backward"] for r in clock["ranks"]] == [2, 2]


def test_replay_stops_the_clock_at_a_wait_during_backward() -> None:
    log = [("launch", "all_reduce", 0, 0), ("wait", 0), ("compute", 2.0), ("launch", "all_reduce", 0, 1),
           ("compute", 0.5), ("wait", 1)]
    clock = B.replay([log, log], 2, 0.5, 0.0)   # every message takes 1 s
    assert clock["ranks"][0] == {"compute_s": 2.5, "end_s": 4.0, "exposed_s": 1.5, "launched_in_backward": 0}
    with pytest.raises(ValueError, match="never launched"):
        B.replay([log, log[:1] + [("wait", 0), ("wait", 1)]], 2, 0.5, 0.0)


def test_modelled_network_and_baseline_follow_the_stated_relations() -> None:
    model = B.TimedMLP((4, 24, 24, 2), block_backward_s=2e-3)
    block_bytes = sum(B.grad_bytes(model)) / 3
    for n in (2, 3, 4):
        alpha, beta = B.modelled_network(model, n)
        latency, transfer = 2 * (n - 1) * alpha, 2 * (n - 1) / n * block_bytes * beta
        assert latency == pytest.approx(transfer) == pytest.approx(2e-3 / 4)
        assert B.baseline_seconds(model, n, alpha, beta) == pytest.approx(latency + 3 * transfer)


class ReferenceGradBuckets:
    """A correct ``GradBuckets`` (the design exercise's contract), for testing the checks; never shipped to a kernel.

    About four buckets of equal bytes in reverse registration order, launched in that order
    from post-accumulate-grad hooks, each in a new flat buffer; ``wait()`` waits on each handle
    and copies ``buffer / N`` back. ``after_backward=True`` launches nothing during backward and
    all-reduces everything in ``wait()`` (correct, nothing overlaps); ``per_tensor=True`` gives
    every parameter its own bucket.
    """

    def __init__(self, model: nn.Module, group: Any = None, after_backward: bool = False,
                 per_tensor: bool = False) -> None:
        self.params = list(model.parameters())
        self.group = group
        sizes = [p.numel() * p.element_size() for p in self.params]
        self.buckets: Buckets = []
        current: list[int] = []
        for i in reversed(range(len(self.params))):
            current.append(i)
            if per_tensor or sum(sizes[j] for j in current) >= sum(sizes) / 4:
                self.buckets.append(current)
                current = []
        self.buckets += [current] if current else []
        self.pending: list[tuple[Any, torch.Tensor]] = []
        self.ready: set[int] = set()
        self.after_backward = after_backward
        for i, p in enumerate(self.params):
            p.register_post_accumulate_grad_hook(lambda p, i=i: self.grad_ready(i))

    def grad_ready(self, index: int) -> None:
        self.ready.add(index)
        while (not self.after_backward and len(self.pending) < len(self.buckets)
               and self.ready.issuperset(self.buckets[len(self.pending)])):
            self.launch()

    def launch(self) -> None:
        buffer = torch.cat([self.params[i].grad.reshape(-1) for i in self.buckets[len(self.pending)]])
        self.pending.append((dist.all_reduce(buffer, group=self.group, async_op=True), buffer))

    def wait(self) -> None:
        while len(self.pending) < len(self.buckets):
            self.launch()
        n = dist.get_world_size(self.group)
        for bucket, (handle, buffer) in zip(self.buckets, self.pending):
            handle.wait()
            offset = 0
            for i in bucket:
                grad = self.params[i].grad
                grad.copy_(buffer[offset: offset + grad.numel()].view_as(grad) / n)
                offset += grad.numel()
        self.pending, self.ready = [], set()


def _after_backward(model: nn.Module, group: Any = None) -> ReferenceGradBuckets:
    return ReferenceGradBuckets(model, group, after_backward=True)


def _per_tensor(model: nn.Module, group: Any = None) -> ReferenceGradBuckets:
    return ReferenceGradBuckets(model, group, per_tensor=True)


def test_synchroniser_checks_accept_the_reference_on_branches_and_a_subgroup() -> None:
    branches = SameInit(l03.TimedBranches, seed=1, kwargs={"branches": 3})
    l03.check_synchroniser(ReferenceGradBuckets, branches, make_batches(2, 12, 5, 3, seed=2), world_size=3)
    l03.check_overlap(ReferenceGradBuckets, branches, make_batches(2, 12, 5, 3, seed=2), world_size=3)
    l03.check_overlap(ReferenceGradBuckets, SameInit(B.TimedMLP, seed=3), make_batches(2, 9, 4, 2, seed=4),
                      world_size=4, ranks=[0, 1, 3])


@pytest.mark.parametrize("cls, message", [(_after_backward, "0 launched before backward returned"),
                                          (_per_tensor, "18 all-reduce")])
def test_overlap_check_rejects_the_naive_designs(cls, message: str) -> None:
    model_fn = SameInit(B.TimedMLP, seed=5)
    batches = make_batches(1, 6, 4, 2, seed=6)
    l03.check_synchroniser(cls, model_fn, batches, world_size=3)   # correct ...
    with pytest.raises(AssertionError, match=message):                # ... but exposed
        l03.check_overlap(cls, model_fn, batches, world_size=3)


def _run_of(got: dict, local: dict, launches: int = 1, collectives: int = 1) -> dict:
    log = [("launch", "all_reduce", 8, k) for k in range(launches)]
    return {"log": log, "collectives": collectives, "got": got, "local": local}


def test_synchroniser_mistakes_are_named() -> None:
    local = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([3.0, 6.0])}]
    mean = {"w": torch.tensor([2.0, 4.0])}
    assert B.synchroniser_mistake([[_run_of(mean, lo)] for lo in local], [mean], "2 ranks") is None
    assert "still this rank's own gradient" in B.synchroniser_mistake([[_run_of(lo, lo)] for lo in local], [mean], "")
    assert "0 through dist.all_reduce" in B.synchroniser_mistake([[_run_of(mean, lo, 0)] for lo in local], [mean], "")
    swapped = [[_run_of({"w": torch.tensor([2.0, 5.0])}, lo)] for lo in local]
    assert "same order" in B.synchroniser_mistake(swapped, [mean], "")


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
