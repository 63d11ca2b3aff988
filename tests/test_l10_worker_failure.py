"""Fault injection (helpers.runtime.faults), lesson 10's student-side helpers and its instructor references."""
from __future__ import annotations

import math
import os
import random
import time

import numpy as np
import psutil
import pytest
import torch
import torch.distributed as dist

from autograder.lessons import l10
from hang_guard import hang_guard
from helpers.runtime import faults
from helpers import l10_worker_failure as lesson
from helpers.runtime.cluster import CollectiveTimeout, RankError, run


def _steps(n: int) -> list[float]:
    t = torch.ones(2)
    for _ in range(n):
        faults.point("batch")
        dist.all_reduce(t)
    return t.tolist()


def _pid() -> int:
    return os.getpid()


def _gone(pids: list[int], within: float = 60.0) -> bool:
    """Whether all ``pids`` have ended, waiting for them up to ``within`` seconds (a hang guard, not a speed limit)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
            return True
        time.sleep(0.05)
    return False


# --------------------------------------------------------------------------- faults


def test_kill_reports_what_the_survivors_saw_and_the_restart_gets_fresh_ranks() -> None:
    old = run(_pid, world_size=3)
    report = faults.run_with_faults(_steps, 5, faults=[faults.kill(1, "batch", 3)], world_size=3, timeout=20)
    assert isinstance(report.error, RankError) and report.results is None
    killed, survivors = report.views[1], [report.views[0], report.views[2]]
    assert killed.outcome == "kill" and "batch' #3" in killed.what
    # gloo: a dead peer fails the next collective at once. The survivors' own report says so: run()
    # gives the others ERROR_GRACE (1 s) once a rank died, then kills them, and a survivor still
    # waiting in the collective then would have written nothing ("no report").
    for view in survivors:
        assert view.outcome == "raised" and "Connection" in view.what, view
    assert "rank 1: hit fault: kill rank 1" in str(report)
    assert _gone(old), "the old group's processes must all be gone"
    new = run(_pid, world_size=3)
    assert set(new).isdisjoint(old)
    assert run(_steps, 2, world_size=3) == [[9.0, 9.0]] * 3


def test_stall_is_bounded_by_the_timeout() -> None:
    # Rank 2 sleeps an hour: the verdict that names the 3 s timeout is the bound (the hard bound,
    # 18 s here, would report ranks still computing; no bound at all would trip the hang guard).
    with hang_guard("a stalled rank"):
        report = faults.run_with_faults(_steps, 4, faults=[faults.stall(2, "collective", 2)], world_size=3, timeout=3)
    assert isinstance(report.error, CollectiveTimeout)
    assert "did not finish within 3 s and then made no progress" in str(report.error), report.error
    assert report.views[2].outcome == "stall"
    assert [v.outcome for v in report.views[:2]] == ["no report", "no report"]  # still waiting in the collective
    assert run(_steps, 1, world_size=3) == [[3.0, 3.0]] * 3


def test_fail_raises_on_one_rank_and_counts_collectives() -> None:
    report = faults.run_with_faults(_steps, 4, faults=[faults.fail(0, "collective", 3)], world_size=2, timeout=20)
    assert isinstance(report.error, RankError) and report.error.exc_type == "InjectedFault"
    assert report.views[0].outcome == "fail" and "collective #3" in report.views[0].what


def test_no_fault_returns_the_results_and_disarms() -> None:
    report = faults.run_with_faults(_steps, 2, faults=[], world_size=2)
    assert report.error is None and report.results == [[4.0, 4.0]] * 2
    assert [v.outcome for v in report.views] == ["finished", "finished"]
    # the collectives are no longer wrapped: a plain run sees the original functions
    assert run(lambda: getattr(dist.all_reduce, "__name__", ""), world_size=2) == ["all_reduce"] * 2


def test_faults_are_validated() -> None:
    with pytest.raises(ValueError):
        faults.Fault("explode", 0, "batch")
    with pytest.raises(ValueError):
        faults.kill(0, "batch", 0)
    with pytest.raises(ValueError):
        faults.run_with_faults(_steps, 1, faults=[faults.kill(5, "batch")], world_size=2)


def test_arm_from_env_arms_only_the_named_rank() -> None:
    env = {faults.FAULT_ENV: "fail:1:batch:2"}
    try:
        assert faults.arm_from_env(0, env) is None
        faults.point("batch"), faults.point("batch")  # rank 0: nothing happens
        assert faults.arm_from_env(1, env) == faults.fail(1, "batch", 2)
        faults.point("batch")
        with pytest.raises(faults.InjectedFault):
            faults.point("batch")
    finally:
        faults._disarm()


# --------------------------------------------------------------------------- student-side helpers


def test_stream_cursor_resumes_the_same_batches() -> None:
    a = lesson.GlobalStream(num_samples=10, batch_size=4, seed=3)
    batches = [a.next_batch() for _ in range(4)]  # crosses two epoch boundaries
    assert a.state_dict() == {"epoch": 1, "index": 6}
    b = lesson.GlobalStream(num_samples=10, batch_size=4, seed=3)
    b.load_state_dict({"epoch": 0, "index": 8})
    x, y = b.next_batch()
    assert torch.equal(x, batches[2][0]) and torch.equal(y, batches[2][1])
    first_epoch = torch.cat([batches[0][0], batches[1][0], batches[2][0][:2]])
    assert len({tuple(r.tolist()) for r in first_epoch}) == 10, "an epoch visits every sample once"


def test_noisy_model_uses_all_three_generators() -> None:
    import random

    import numpy as np

    model, x = lesson.MODEL(), torch.ones(2, 6, dtype=torch.float64)
    outs = []
    for reseed in (lambda: None, lambda: torch.manual_seed(1), lambda: np.random.seed(1), lambda: random.seed(1)):
        torch.manual_seed(0), np.random.seed(0), random.seed(0)
        reseed()
        outs.append(model(x))
    assert all(not torch.equal(outs[0], o) for o in outs[1:]), "each generator must change the forward pass"
    model.noisy = False
    assert torch.equal(model(x), model(x))


def test_round_trip_driver_and_its_check_accept_the_reference_and_reject_a_lossy_save() -> None:
    directory = lesson.scratch_directory()
    out = run(lesson.round_trip_on_rank, l10.save_checkpoint, l10.load_checkpoint, directory, world_size=2)
    lesson.assert_round_trip(out, "reference")

    def no_cursor_load(*args):
        meta = l10.load_checkpoint(*args)
        return dict(meta, cursor={"epoch": 0, "index": 0})

    out = run(lesson.round_trip_on_rank, l10.save_checkpoint, no_cursor_load, lesson.scratch_directory(),
              world_size=2)
    with pytest.raises(AssertionError, match="data cursor"):
        lesson.assert_round_trip(out, "no cursor")


# --------------------------------------------------------------------------- instructor references


def test_reference_restart_equals_the_uninterrupted_run() -> None:
    l10.check_restart_after_kill(l10.train_resumable, world_size=3, kill_rank=1, kill_batch=4, num_steps=5, every=2)
    l10.check_elastic(l10.train_resumable, old_world_size=4, new_world_size=3)


def test_crash_tests_accept_the_reference_and_catch_an_early_commit() -> None:
    l10.check_crashes(l10.save_checkpoint, l10.load_checkpoint, "4 ranks, ranks 0 and 3")
    l10.check_stale_listing(l10.save_checkpoint, l10.load_checkpoint, world_size=3, stale_rank=1)
    l10.check_nothing_committed(l10.save_checkpoint, l10.load_checkpoint, world_size=3)

    def early(directory, step, model, optimizer, cursor, scaler=None):
        """The reference's files and marker, but rank 0 commits before the others' files are in place."""
        path = l10.step_dir(directory, step)
        os.makedirs(path, exist_ok=True)
        state = {"step": step, "world_size": dist.get_world_size(), "cursor": dict(cursor),
                 "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": None,
                 "rng": {"torch": torch.get_rng_state(), "python": random.getstate(),
                         "numpy": (np_state := np.random.get_state())[:1] + (torch.from_numpy(
                             np_state[1].astype(np.int64)),) + np_state[2:]}}
        if dist.get_rank() == 0:
            torch.save({"step": step, "world_size": dist.get_world_size()}, os.path.join(path, l10.MARKER))
        torch.save(state, os.path.join(path, f"rank_{dist.get_rank()}.pt"))
        dist.barrier()

    with pytest.raises(AssertionError, match="killed before its write #1.*the restart failed"):
        lesson.crash_test(early, l10.load_checkpoint, world_size=3, victims=[2])


def test_a_stale_listing_makes_ranks_that_do_not_agree_fail() -> None:
    def own_view(directory, model, optimizer, scaler=None):
        """The reference's load, each rank on its own listing (no collective)."""
        steps = [int(e[len("step_"):]) for e in os.listdir(directory)
                 if os.path.exists(os.path.join(directory, e, l10.MARKER))]
        return {"step": max(steps), "cursor": {"epoch": 0, "index": 0}, "world_size": dist.get_world_size()}

    with pytest.raises(AssertionError, match=r"resumed from steps \[4, 2, 4\]"):
        lesson.stale_test(l10.save_checkpoint, own_view, world_size=3, stale_rank=1)


def test_reference_uneven_and_reshard_and_intervals() -> None:
    l10.check_uneven(l10.train_uneven, "3 ranks, 3/5/0 batches")
    l10.check_reshard(l10.reshard_optimizer_state)
    l10.check_intervals(l10.young_interval, l10.daly_interval, l10.expected_lost_time)


def test_young_and_daly_published_forms() -> None:
    # Young 1974: T = sqrt(2 delta M); Daly 2006: the higher-order series minus delta, M when delta >= 2M.
    assert l10.young_interval(50.0, 10_000.0, 1) == math.sqrt(2 * 50 * 10_000)
    r = 50 / (2 * 10_000)
    assert l10.daly_interval(50.0, 10_000.0, 1) == pytest.approx(
        math.sqrt(2 * 50 * 10_000) * (1 + math.sqrt(r) / 3 + r / 9) - 50, rel=1e-15)
    assert l10.daly_interval(300.0, 1000.0, 10) == 100.0
    # Young's optimum minimises the first-order lost time
    lost = [l10.expected_lost_time(1e6, t, 60, 0, 1e5, 1) for t in (3400, 3464.1, 3530)]
    assert lost[1] < lost[0] and lost[1] < lost[2]
