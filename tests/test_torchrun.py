"""Lesson 10's checkpoint and resume code under torchrun: a killed worker, an elastic restart, the same run."""
from __future__ import annotations

import torch

from autograder import torchrun_restart as script

TIMEOUT_S = 300.0  # per torchrun launch; the whole process group is killed after it


def _final_states(out: str) -> list[dict]:
    return [torch.load(f"{out}/rank{r}.pt", weights_only=True) for r in range(2)]


def test_a_worker_killed_under_torchrun_restarts_and_ends_equal_to_an_uninterrupted_run(tmp_path) -> None:
    clean = script.launch(str(tmp_path / "clean_ckpt"), str(tmp_path / "clean"), max_restarts=0, timeout=TIMEOUT_S)
    assert clean.returncode == 0, clean.stderr[-3000:]
    killed = script.launch(str(tmp_path / "ckpt"), str(tmp_path / "out"), fault="kill:1:batch:3", timeout=TIMEOUT_S)
    assert killed.returncode == 0, killed.stderr[-3000:]
    lines = script.events(killed.stdout)
    assert "[attempt 0, rank 1] armed: kill rank 1 at hook 'batch' #3" in lines
    assert "[attempt 1, rank 0] world size 2; latest committed step: 2" in lines, lines
    assert not any(line.startswith("[attempt 0") and "finished" in line for line in lines), lines
    for rank, (got, want) in enumerate(zip(_final_states(str(tmp_path / "out")), _final_states(str(tmp_path / "clean")))):
        assert got["step"] == want["step"] == 6
        assert got["cursor"] == want["cursor"]
        assert got["rng"] == want["rng"], f"rank {rank}: random generators differ after the restart"
        for part in ("params", "optimizer"):
            assert got[part].keys() == want[part].keys()
            for name in want[part]:
                assert torch.equal(got[part][name], want[part][name]), f"rank {rank}: {part} {name} differs"


def test_events_are_ordered_by_attempt_and_rank() -> None:
    stdout = "noise\n[attempt 1, rank 0] b\n[attempt 0, rank 1] a\n[attempt 0, rank 0] c\n[attempt 0, rank 1] d\n"
    assert script.events(stdout) == ["[attempt 0, rank 0] c", "[attempt 0, rank 1] a", "[attempt 0, rank 1] d",
                                     "[attempt 1, rank 0] b"]
