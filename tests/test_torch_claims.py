"""Claims the chapters make about gloo and PyTorch, checked by a run on the installed torch.

Each test names the chapter that states the claim; if a torch upgrade changes the behaviour,
the test fails and the chapter must change with it. Raw process groups (not helpers.runtime.cluster,
whose ledger stops mismatched collectives before gloo sees them), forked for speed.
"""
from __future__ import annotations

import datetime
import faulthandler
import multiprocessing as mp
import os
import queue
import socket
import time

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TIMEOUT_S = 2  # the group's timeout; gloo's default is 30 minutes


def _all_reduce_ranked(rank: int, numel: list[int], port: int, results: "mp.Queue", done) -> None:
    faulthandler.disable()  # an expected SIGABRT must not dump a traceback into the test log
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=len(numel), timeout=datetime.timedelta(seconds=TIMEOUT_S))
    t = torch.arange(numel[rank], dtype=torch.float32) + 100 * rank
    try:
        dist.all_reduce(t)
        results.put((rank, "returned", t.tolist()))
    except RuntimeError as exc:
        results.put((rank, "raised", str(exc).splitlines()[0][:160]))
    results.close()
    results.join_thread()
    done.wait(120)  # stay in the group until the parent has every outcome: the peer's error is not our exit
    os._exit(0)  # no barrier or destroy: the group is broken on purpose


def _mismatched_all_reduce(numel: list[int]) -> tuple[dict[int, int | None], dict[int, tuple[str, list | str]]]:
    """One all_reduce of ``arange(numel[r]) + 100 r`` on each rank r; exit codes and outcomes by rank."""
    ctx = mp.get_context("fork")
    results, done = ctx.Queue(), ctx.Event()
    port = _free_port()
    procs = [ctx.Process(target=_all_reduce_ranked, args=(r, numel, port, results, done)) for r in range(len(numel))]
    for p in procs:
        p.start()
    outcomes = {}
    deadline = time.monotonic() + 120  # the group times out after TIMEOUT_S; this only turns a hang into a failure
    while len(outcomes) < len(procs) and time.monotonic() < deadline:
        try:
            rank, kind, what = results.get(timeout=0.2)
            outcomes[rank] = (kind, what)
        except queue.Empty:
            if not any(p.is_alive() for r, p in enumerate(procs) if r not in outcomes):
                break  # the ranks still missing died without reporting (SIGABRT)
    done.set()
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
    return {r: p.exitcode for r, p in enumerate(procs)}, outcomes


def test_small_shape_mismatch_returns_wrong_values_while_the_peer_times_out() -> None:
    # Chapters 01 (1.B), 02 (2.6), 03 (3.3): 4 elements on rank 0 against 3 on rank 1. Rank 1
    # returns without an error and with wrong values; rank 0 waits for data that never comes
    # until the group's timeout, although rank 1 is still alive.
    exitcodes, outcomes = _mismatched_all_reduce([4, 3])
    assert exitcodes == {0: 0, 1: 0}
    assert outcomes[1][0] == "returned", outcomes
    assert outcomes[1][1] != [100.0, 102.0, 104.0], outcomes  # the sum of the first 3 elements
    assert outcomes[0][0] == "raised" and "Timed out" in outcomes[0][1], outcomes


def test_large_shape_mismatch_aborts_the_process() -> None:
    # Chapter 02, section 2.6: larger mismatches kill a rank with SIGABRT (gloo's enforce).
    exitcodes, _ = _mismatched_all_reduce([1000, 2000])
    assert exitcodes[0] == -6, exitcodes


def test_float32_counts_are_exact_up_to_two_to_the_24() -> None:
    # Chapter 02, section 2.6: 4096 sequences of 4096 tokens is 2**24, the last integer of
    # float32's contiguous exact range; one token more rounds, one sequence more does not
    # (4097 x 4096 is even, and above 2**24 float32 holds every even integer up to 2**25).
    assert float(torch.tensor(4096 * 4096, dtype=torch.float32)) == 2 ** 24
    assert float(torch.tensor(2 ** 24 + 1, dtype=torch.float32)) != 2 ** 24 + 1
    assert float(torch.tensor(4097 * 4096, dtype=torch.float32)) == 4097 * 4096
    assert float(torch.tensor(2048, dtype=torch.float16)) == 2048
    assert float(torch.tensor(2049, dtype=torch.float16)) != 2049
    assert torch.isinf(torch.tensor(65520.0).to(torch.float16))


def test_int64_counts_are_exact_far_beyond() -> None:
    assert int(torch.tensor(2 ** 53 + 1, dtype=torch.int64)) == 2 ** 53 + 1
