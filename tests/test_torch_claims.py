"""Claims the chapters make about gloo and PyTorch, checked by a run on the installed torch.

Each test names the chapter that states the claim; if a torch upgrade changes the behaviour,
the test fails and the chapter must change with it. Raw process groups (not helpers.cluster,
whose ledger stops mismatched collectives before gloo sees them), forked for speed.
"""
from __future__ import annotations

import datetime
import faulthandler
import multiprocessing as mp
import os
import socket

import torch
import torch.distributed as dist


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _all_reduce_ones(rank: int, numel: list[int], port: int, results: "mp.Queue") -> None:
    faulthandler.disable()  # an expected SIGABRT must not dump a traceback into the test log
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=len(numel), timeout=datetime.timedelta(seconds=3))
    t = torch.ones(numel[rank])
    try:
        dist.all_reduce(t)
        results.put((rank, "returned", t.tolist()[:4]))
    except RuntimeError as exc:
        results.put((rank, "raised", str(exc).splitlines()[0][:120]))
    results.close()
    results.join_thread()  # flush before the hard exit
    os._exit(0)  # no barrier or destroy: the group is broken on purpose


def _mismatched_all_reduce(numel: list[int]) -> tuple[dict[int, int | None], dict[int, tuple[str, list | str]]]:
    """Run one all_reduce whose element count differs per rank; exit codes and outcomes by rank."""
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_all_reduce_ones, args=(r, numel, port, results)) for r in range(len(numel))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()
    outcomes = {}
    while not results.empty():
        rank, kind, what = results.get()
        outcomes[rank] = (kind, what)
    return {r: p.exitcode for r, p in enumerate(procs)}, outcomes


def test_small_shape_mismatch_can_return_silently_on_one_rank() -> None:
    # Chapter 02, section 2.6: a mismatch is not always an abort. 3 vs 4 elements: rank 0
    # returns as if the collective had worked, only its peer fails.
    exitcodes, outcomes = _mismatched_all_reduce([3, 4])
    assert exitcodes == {0: 0, 1: 0}
    assert outcomes[0] == ("returned", [2.0, 2.0, 2.0]), outcomes
    assert outcomes[1][0] == "raised", outcomes


def test_large_shape_mismatch_aborts_the_process() -> None:
    # Chapter 02, section 2.6: larger mismatches kill a rank with SIGABRT (gloo's enforce).
    exitcodes, _ = _mismatched_all_reduce([1000, 2000])
    assert exitcodes[0] == -6, exitcodes


def test_float32_counts_are_exact_up_to_two_to_the_24() -> None:
    # Chapter 02, section 2.6: 4096 sequences of 4096 tokens is 2**24, the last integer of
    # float32's contiguous exact range; one token more rounds.
    assert float(torch.tensor(4096 * 4096, dtype=torch.float32)) == 2 ** 24
    assert float(torch.tensor(2 ** 24 + 1, dtype=torch.float32)) != 2 ** 24 + 1
    assert float(torch.tensor(2048, dtype=torch.float16)) == 2048
    assert float(torch.tensor(2049, dtype=torch.float16)) != 2049
    assert torch.isinf(torch.tensor(65520.0).to(torch.float16))


def test_int64_counts_are_exact_far_beyond() -> None:
    assert int(torch.tensor(2 ** 53 + 1, dtype=torch.int64)) == 2 ** 53 + 1
