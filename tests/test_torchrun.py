"""Lesson 10's checkpoint and resume code under torchrun: a killed worker, an elastic restart, the same run."""
from __future__ import annotations

import pytest
import torch

from autograder import torchrun_restart as script

TIMEOUT_S = 300.0  # per torchrun launch; the whole process group is killed after it


def _final_states(out: str) -> list[dict]:
    return [torch.load(f"{out}/rank{r}.pt", weights_only=True) for r in range(2)]


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> str:
    """Where the uninterrupted run (no fault, no restart) wrote its final states."""
    root = tmp_path_factory.mktemp("clean")
    run = script.launch(str(root / "ckpt"), str(root / "out"), max_restarts=0, timeout=TIMEOUT_S)
    assert run.returncode == 0, run.stderr[-3000:]
    return str(root / "out")


def test_a_worker_killed_under_torchrun_restarts_and_ends_equal_to_an_uninterrupted_run(tmp_path, clean) -> None:
    killed = script.launch(str(tmp_path / "ckpt"), str(tmp_path / "out"), fault="kill:1:batch:3", timeout=TIMEOUT_S)
    assert killed.returncode == 0, killed.stderr[-3000:]
    lines = script.events(killed.stdout)
    assert "[attempt 0, rank 1] armed: kill rank 1 at hook 'batch' #3" in lines
    assert "[attempt 1, rank 0] world size 2; latest committed step: 2" in lines, lines
    assert not any(line.startswith("[attempt 0") and "finished" in line for line in lines), lines
    assert any(line.startswith("[attempt 1, rank 1] finished at step 6 after drawing 4 batches")
               for line in lines), lines
    for rank, (got, want) in enumerate(zip(_final_states(str(tmp_path / "out")), _final_states(clean))):
        assert got["step"] == want["step"] == 6
        assert got["cursor"] == want["cursor"]
        assert got["rng"] == want["rng"], f"rank {rank}: random generators differ after the restart"
        for part in ("params", "optimizer"):
            assert got[part].keys() == want[part].keys()
            for name in want[part]:
                assert torch.equal(got[part][name], want[part][name]), f"rank {rank}: {part} {name} differs"


NEVER_LOADS = """
from autograder.lessons import l10

def train_resumable(model, optimizer, stream, directory, num_steps, every):
    return l10._train(model, optimizer, stream, directory, num_steps, every, lambda *args: None, old_denominator=False)
"""


def test_a_restart_that_never_loads_its_checkpoint_ends_elsewhere(tmp_path, clean) -> None:
    """The restarted attempt starts from other seeds and weights, so skipping the load cannot pass."""
    impl = tmp_path / "never_loads.py"
    impl.write_text(NEVER_LOADS)
    killed = script.launch(str(tmp_path / "ckpt"), str(tmp_path / "out"), fault="kill:1:batch:3", impl=str(impl),
                           timeout=TIMEOUT_S)
    assert killed.returncode == 0, killed.stderr[-3000:]
    got, want = _final_states(str(tmp_path / "out"))[0], _final_states(clean)[0]
    assert got["batches"] == 6 != 6 - 2
    assert any(not torch.equal(got["params"][name], want["params"][name]) for name in want["params"])


def test_events_are_ordered_by_attempt_and_rank() -> None:
    stdout = "noise\n[attempt 1, rank 0] b\n[attempt 0, rank 1] a\n[attempt 0, rank 0] c\n[attempt 0, rank 1] d\n"
    assert script.events(stdout) == ["[attempt 0, rank 0] c", "[attempt 0, rank 1] a", "[attempt 0, rank 1] d",
                                     "[attempt 1, rank 0] b"]
