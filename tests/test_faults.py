"""helpers.runtime.faults: a frozen rank (a lost node) and what a "collective" fault counts."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import psutil
import torch
import torch.distributed as dist
from torch import nn

from helpers.runtime import faults
from helpers.runtime.cluster import RankError, run

GROUP_TIMEOUT_S = 2.0


def _steps_in_group_with_timeout(n: int) -> list[float]:
    group = dist.new_group(timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    t = torch.ones(2)
    for _ in range(n):
        faults.point("batch")
        dist.all_reduce(t, group=group)
    return t.tolist()


def _pid() -> int:
    return os.getpid()


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_freeze_leaves_the_peers_waiting_until_the_group_timeout() -> None:
    report = faults.run_with_faults(_steps_in_group_with_timeout, 4, faults=[faults.freeze(1, "batch", 2)],
                                    world_size=2, timeout=30)
    assert isinstance(report.error, RankError) and report.results is None
    frozen, survivor = report.views[1], report.views[0]
    assert frozen.outcome == "freeze" and "batch' #2" in frozen.what
    # no connection error: the frozen process's sockets stay open, only the group's timeout ends the
    # wait (the message names it; how long the wait took is the benchmark's business, not a test's)
    assert survivor.outcome == "raised", survivor
    assert f"Timed out waiting {GROUP_TIMEOUT_S * 1000:.0f}ms" in survivor.what, survivor
    assert "Connection reset" not in survivor.what and survivor.seconds > frozen.seconds, report


def test_a_frozen_rank_does_not_outlive_the_call() -> None:
    old = run(_pid, world_size=2)
    faults.run_with_faults(_steps_in_group_with_timeout, 3, faults=[faults.freeze(0, "batch", 1)],
                           world_size=2, timeout=30)
    deadline = time.monotonic() + 60  # the call has ended them; the wait only turns a hang into a failure
    while any(_running(p) for p in old) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_running(p) for p in old), "the frozen rank and its peer must be gone after the call"
    assert run(_steps_in_group_with_timeout, 1, world_size=2) == [[2.0, 2.0]] * 2


def _ddp_steps() -> list[float]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(nn.Linear(3, 1))
    for _ in range(2):
        model.zero_grad()
        model(torch.full((2, 3), float(dist.get_rank() + 1))).sum().backward()  # the reducer all-reduces here
    return model.module.weight.grad.flatten().tolist()


def test_collective_faults_do_not_count_what_ddp_issues_from_cpp() -> None:
    report = faults.run_with_faults(_ddp_steps, faults=[faults.fail(0, "collective", 1)], world_size=2)
    assert report.error is None, report  # DDP all-reduced gradients, yet collective #1 never came
    assert report.results[0] == report.results[1] == [3.0, 3.0, 3.0]  # (2 * 1 + 2 * 2) / 2 ranks
