"""Unit tests for helpers.l04_accumulation and lesson 04's instructor side."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import io
import math

import pytest
import torch
import torch.nn.functional as F

from autograder.lessons import l04 as ref
from helpers import l04_accumulation as acc
from helpers.runtime.ledger import CollectiveRecord, Ledger
from helpers.shared.models import TinyMLP
from helpers.shared.state import SameInit


def test_make_window_shapes_and_determinism():
    w = acc.make_window([[1, 3], [2, 5]], in_features=6, out_features=2, seed=3)
    assert [[len(x) for x, _ in r] for r in w] == [[1, 3], [2, 5]]
    assert w[1][1][0].shape == (5, 6) and w[1][1][1].shape == (5, 2)
    again = acc.make_window([[1, 3], [2, 5]], in_features=6, out_features=2, seed=3)
    assert all(torch.equal(a[0], b[0]) for ra, rb in zip(w, again) for a, b in zip(ra, rb))


def test_make_window_rejects_bad_sizes_and_poisons():
    with pytest.raises(ValueError, match="same number"):
        acc.make_window([[1, 2], [3]])
    with pytest.raises(ValueError, match="at least one row"):
        acc.make_window([[1, 0]])
    w = acc.make_window([[2], [2]], poison=(1, 0))
    assert math.isinf(w[1][0][0][0, 0]) and torch.isfinite(w[0][0][0]).all()


def test_reference_training_skip_and_clip():
    model = SameInit(TinyMLP, seed=1)()
    windows = [acc.make_window([[2, 3], [1, 1]], seed=s) for s in (1, 2)]
    sgd = acc.OptimizerSpec("sgd", {"lr": 0.1, "momentum": 0.9})
    skipped = ref.reference_training(model, windows, sgd, 1.0, skip=[0, 1])
    assert all(torch.equal(skipped["state"][n], t.double()) for n, t in model.state_dict().items()
               if t.is_floating_point())
    assert skipped["opt_state"] == {} and math.isnan(skipped["clip"][0])
    clipped = ref.reference_training(model, windows, sgd, 1e-3)
    assert all(0 < c < 1 for c in clipped["clip"])
    adam = ref.reference_training(model, windows, acc.OptimizerSpec("adam", {"lr": 0.01}), math.inf)
    assert float(adam["opt_state"]["fc1.weight.step"]) == 2.0
    x = torch.cat([x for r in windows[0] for x, _ in r])
    y = torch.cat([y for r in windows[0] for _, y in r])
    assert adam["losses"][0] == pytest.approx(F.mse_loss(model(x), y).item(), rel=1e-6)


def test_window_allreduce_cost():
    assert ref.window_allreduce_cost(1000, 4, 2, 4, no_sync=True) == (1, 4000.0)
    assert ref.window_allreduce_cost(1000, 4, 2, 4, no_sync=False, num_buckets=3) == (12, 16000.0)
    assert ref.window_allreduce_cost(1000, 4, 1, 4, no_sync=False) == (4, 0.0)


def test_stored_results_are_the_references():
    for name, case in ref.VISIBLE_CASES.items():
        expected = ref.expected_training(case)
        stored = acc.stored_reference(name)
        assert [v is None for v in stored["losses"]] == [v is None for v in expected["losses"]]
        assert [v for v in stored["losses"] if v is not None] == pytest.approx(
            [v for v in expected["losses"] if v is not None], rel=1e-8)
        for key in ("state", "opt_state"):
            assert stored[key].keys() == expected[key].keys()
            for n, t in expected[key].items():
                torch.testing.assert_close(stored[key][n], t, rtol=1e-8, atol=1e-12)
    assert acc.stored_window_cost(244, 4, 3, 6, no_sync=False) == ref.window_allreduce_cost(244, 4, 3, 6, no_sync=False)
    assert (acc.stored_window_cost(7_000_000_000, 2, 1024, 64, no_sync=True)
            == (1, pytest.approx(2 * 1023 / 1024 * 14e9)))
    for case in [(1000, 4, 2, 4), (123_457, 4, 3, 5), (10, 4, 1, 3), (5, 8, 4, 1), (0, 4, 8, 16)]:
        with pytest.raises(KeyError):
            acc.stored_window_cost(*case, no_sync=True)


def _ledger(windows, world_size=2):
    """A ledger of all-reduces of ``windows[w]`` element counts, each window closed by a barrier."""
    records = [CollectiveRecord(0, "barrier", "none", (), 0, (0, 1), 0.0)]
    for numels in windows:
        ring = 2 * (world_size - 1) / world_size * 4
        records += [CollectiveRecord(0, "all_reduce", "float32", (n,), n, (0, 1), ring * n) for n in numels]
        records.append(CollectiveRecord(0, "barrier", "none", (), 0, (0, 1), 0.0))
    return Ledger([list(records) for _ in range(world_size)])


def test_window_collectives_and_budget():
    ledger = _ledger([[244, 3], [244, 3]])
    assert [[r.numel for r in w] for w in acc.window_collectives(ledger, 1)] == [[244, 3], [244, 3]]
    acc.assert_window_budget(ledger, [0, 1], 244, num_windows=2, micro_batches=3, case="ok")
    acc.assert_window_budget(_ledger([[244 + 16]]), [0, 1], 244, num_windows=1, micro_batches=3, case="packed")
    assert acc.window_budget_bytes(244, 2) == 4 * 260
    with pytest.raises(AssertionError, match="no_sync"):
        acc.assert_window_budget(_ledger([[244, 244]]), [0, 1], 244, num_windows=1, micro_batches=2, case="k")
    with pytest.raises(AssertionError, match="one collective"):
        acc.assert_window_budget(_ledger([[1, 244, 1]]), [0, 1], 244, num_windows=1, micro_batches=2, case="3")
    with pytest.raises(AssertionError, match="budget"):
        acc.assert_window_budget(_ledger([[244 + 17]]), [0, 1], 244, num_windows=1, micro_batches=2, case="bytes")
    with pytest.raises(AssertionError, match="barrier"):
        acc.assert_window_budget(_ledger([[244], []]), [0, 1], 244, num_windows=1, micro_batches=2, case="barrier")


def test_one_micro_batch_per_forward():
    out = {"forward_rows": [[1, 3], [3, 1]]}
    acc.assert_one_micro_batch_per_forward([out, None], [[1, 3]], "ok")
    with pytest.raises(AssertionError, match="4 rows"):
        acc.assert_one_micro_batch_per_forward([{"forward_rows": [[4]]}], [[1, 3]], "concatenated")


def test_train_cases_skip_what_overflows():
    assert ref.TRAIN_CASES["3 ranks, loss_scale 2**140: every scaled gradient overflows"].skipped() == [0, 1]
    poisoned = ref.TRAIN_CASES["4 ranks, inf in rank 0's last micro-batch of window 0, SGD"]
    assert poisoned.skipped() == [0] and ref.expected_training(poisoned)["losses"][0] is None
    assert math.isinf(poisoned.windows()[0][0][1][0][0, 0])
    assert sorted(ref.OBJECTIVE_CASES + ref.COMMUNICATION_CASES + ref.SCALING_CASES + ref.SKIP_CASES) == sorted(
        ref.TRAIN_CASES)


def test_assert_found_inf_messages():
    acc.assert_found_inf([(True, True), (True, True)], True, "ok")
    with pytest.raises(AssertionError, match="ranks disagree"):
        acc.assert_found_inf([(False, True), (True, True)], True, "local")
    with pytest.raises(AssertionError, match="Python bool"):
        acc.assert_found_inf([(torch.tensor(True), True)], True, "tensor")
    with pytest.raises(AssertionError, match="nan"):
        acc.assert_found_inf([(False, True), (False, True)], True, "missed")
    with pytest.raises(AssertionError, match="modified"):
        acc.assert_found_inf([(True, False)], True, "touched")


def _fake_run(steps, state, results):
    return {"results": results, "state": state, "grads_cleared": [True] * len(results),
            "opt_state": {"fc1.weight.step": torch.tensor(float(steps), dtype=torch.float64)}}


def test_assert_windows_match_hints():
    state = {"w": torch.ones(3)}
    expected = {"state": {"w": torch.ones(3, dtype=torch.float64)}, "losses": [0.5],
                "opt_state": {"fc1.weight.step": torch.tensor(1.0, dtype=torch.float64)}}
    good = _fake_run(1, state, [(0.5, True)])
    acc.assert_windows_match([good, good], expected, 3, "ok")
    with pytest.raises(AssertionError, match="one step per micro-batch"):
        acc.assert_windows_match([_fake_run(3, state, [(0.5, True)])], expected, 3, "steps")
    with pytest.raises(AssertionError, match="window loss"):
        acc.assert_windows_match([_fake_run(1, state, [(0.7, True)])], expected, 3, "loss")
    with pytest.raises(AssertionError, match="diverged"):
        acc.assert_windows_match([good, _fake_run(1, {"w": torch.zeros(3)}, [(0.5, True)])], expected, 3, "div")
    with pytest.raises(AssertionError, match="reference"):
        acc.assert_windows_match([_fake_run(1, {"w": torch.zeros(3)}, [(0.5, True)])], expected, 3, "param")
    with pytest.raises(AssertionError, match="EVERY rank"):
        acc.assert_skipped_together([good, _fake_run(1, state, [(0.5, False)])], [True], "skip")


class _AlwaysEqual(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def test_window_cost_checks():
    acc.assert_window_cost(lambda n, b, w, k, **kw: (6, 240.0), [((10, 4, 2, 3, False, 2), (6, 240.0))])
    with pytest.raises(AssertionError, match="expected"):
        acc.assert_window_cost(lambda n, b, w, k, **kw: (1, 0.0), [((10, 4, 2, 3, False, 1), (3, 120.0))])
    ref.check_window_cost(ref.window_allreduce_cost, [(10, 4, 2, 3, False, 2), (7, 2, 5, 4, True, 1)])
    with pytest.raises(AssertionError, match="plain data"):
        ref.check_window_cost(lambda n, b, w, k, **kw: (_AlwaysEqual(0), _AlwaysEqual(0)), [(10, 4, 2, 3, False, 2)])


def test_hidden_checks_accept_only_plain_values():
    ref.check_found_inf([(True, True), None, (True, True)], True, "ok")
    with pytest.raises(AssertionError, match="plain data"):
        ref.check_found_inf([(_AlwaysEqual(1), True)], True, "subclass")
    state = {"w": torch.ones(3)}
    expected = {"state": {"w": torch.ones(3, dtype=torch.float64)}, "losses": [0.5],
                "opt_state": {"fc1.weight.step": torch.tensor(1.0, dtype=torch.float64)}}
    skipped = dict(expected, losses=[None, 0.5])
    ref.check_windows([_fake_run(1, state, [(0.9, False), (0.5, True)])], skipped, 3, "skip")
    with pytest.raises(AssertionError, match="plain data"):
        ref.check_skipped_together([_fake_run(1, state, [(0.5, _AlwaysEqual(1))])], [True], "subclass")


def test_plot_window_communication_renders():
    measured = {"with no_sync": {"count": [1, 1], "bytes": [976.0, 976.0]},
                "without no_sync": {"count": [1, 2], "bytes": [976.0, 1952.0]}}
    fig = acc.plot_window_communication([1, 2], measured, 244, 4, 3)
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    assert buf.getvalue().startswith(b"\x89PNG")


def test_accumulation_explorer_headless():
    box = acc.accumulation_explorer(num_params=1_300_000_000, bytes_per_element=2, world_size=8, micro_batches=4)
    result = box.update()
    assert result["no_sync_allreduces"] == 1 and result["every_micro_batch_allreduces"] == 4
    assert result["every_micro_batch_bytes"] == pytest.approx(4 * result["no_sync_bytes"])
    box.controls["micro_batches"].value = 8
    assert box.last_result["every_micro_batch_allreduces"] == 8


def _hooked_backward(corrupt_rank):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    ddp = DDP(TinyMLP())
    hook = None if corrupt_rank is None else acc.InfAfterReduce(corrupt_rank, armed=True)
    acc.register_ledger_hook(ddp, hook)
    ddp(torch.randn(2, 8)).sum().backward()
    return dist.get_rank(), all(bool(torch.isfinite(p.grad).all()) for p in ddp.parameters())


def test_comm_hooks_are_recorded_and_corrupt_one_rank():
    from helpers.runtime.cluster import run

    out, ledger = run(_hooked_backward, None, world_size=2, timeout=30, ledger=True)
    assert [finite for _, finite in out] == [True, True]
    assert len(acc.gradient_allreduces(ledger, 244)) == 1
    out = run(_hooked_backward, 1, world_size=2, timeout=30)
    assert [finite for _, finite in out] == [True, False]
