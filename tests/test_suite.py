"""tests/suite.py, what ``make test`` runs: every part's failure fails the whole, 'no tests' included."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import suite


@dataclass
class Commands:
    """The commands the suite ran, and the exit status to give those ending in a key."""

    exits: dict[str, int] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)

    def run(self, command: list[str], env: dict[str, str] | None = None) -> int:
        words = " ".join(command[command.index("-m") + 1:]) + (" as on another CPU" if env else "")
        self.ran.append(words)
        return next((code for key, code in self.exits.items() if words.endswith(key)), 0)


@pytest.fixture
def commands(monkeypatch) -> Commands:
    fake = Commands()
    monkeypatch.setattr(suite, "run", fake.run)
    monkeypatch.setattr(suite, "run_at_once",
                        lambda named: {name: fake.run(c, env) for name, (c, env) in named.items()})
    monkeypatch.setattr(suite, "run_beside", lambda command, queue: (
        fake.run(command), {name: fake.run(queued, env) for name, queued, env, _ in queue}))
    return fake


def test_all_parts_pass(commands: Commands, capsys) -> None:
    assert suite.main([]) == 0
    assert commands.ran[:4] == ["autograder release --check", "autograder store --check",
                                "autograder store --check as on another CPU", "ruff check ."]
    assert commands.ran[4].endswith("-m not alone") and commands.ran[7].endswith("-m alone and not load")
    assert commands.ran[5].startswith("autograder check") and commands.ran[5].endswith("as on another CPU")
    assert "--nbval-lax" in commands.ran[6] and commands.ran[6].endswith("/notebooks")  # the chapters, before the book
    assert "all parts passed" in capsys.readouterr().out


@pytest.mark.parametrize("part", ["release --check", "store --check", "--check as on another CPU", "ruff check .",
                                  "-m not alone", "--budget 900 as on another CPU", "/notebooks",
                                  "-m alone and not load"])
def test_a_failing_part_fails_the_suite(commands: Commands, part: str) -> None:
    commands.exits[part] = 1
    assert suite.main([]) == 1


@pytest.mark.parametrize("part, name", [("-m alone and not load", "pytest -m alone"),
                                        ("/notebooks", "chapters under nbval")])
def test_no_tests_collected_is_a_failure(commands: Commands, capsys, part: str, name: str) -> None:
    commands.exits[part] = suite.NO_TESTS_COLLECTED
    assert suite.main([]) == 1
    out = capsys.readouterr().out
    assert f"{name} collected no tests: failing" in out and f"FAILED: {name}" in out


def waits_for(flag: Path, then: str) -> str:
    """Python code that waits (at most 60 s) for ``flag`` to exist, then runs ``then``; exits 1 if it never does."""
    return (f"import pathlib, sys, time\nfor _ in range(1200):\n    if pathlib.Path({str(flag)!r}).exists(): break\n"
            f"    time.sleep(0.05)\nelse:\n    sys.exit(1)\n{then}")


def test_run_beside_runs_the_queue_beside_the_command_one_after_another(tmp_path, capsys) -> None:
    started, first_ended, second_ran = tmp_path / "started", tmp_path / "first-ended", tmp_path / "second-ran"
    # The command waits for the second queued one, which needs the first to have ended, which waits for the command.
    command = f"import pathlib; pathlib.Path({str(started)!r}).touch()\n" + waits_for(second_ran, "")
    first = waits_for(started, f"import pathlib; pathlib.Path({str(first_ended)!r}).touch(); sys.exit(3)")
    second = (f"import pathlib, sys; ok = pathlib.Path({str(first_ended)!r}).exists(); print('second ran', ok)\n"
              f"pathlib.Path({str(second_ran)!r}).touch(); sys.exit(0 if ok else 1)")
    code, codes = suite.run_beside([sys.executable, "-c", command], [
        ("first", [sys.executable, "-c", first], {}, tmp_path / "first.log"),
        ("second", [sys.executable, "-c", second], {}, tmp_path / "second.log")])
    assert (code, codes) == (0, {"first": 3, "second": 0})
    assert "second ran True" in capsys.readouterr().out  # its log, printed at the end


def test_run_at_once_runs_the_commands_together_and_returns_each_exit_status(tmp_path) -> None:
    flag = tmp_path / "second-started"
    # The first waits for a file only the second writes: run one after the other, it exits 1.
    waits = waits_for(flag, "sys.exit(0)")
    writes = f"import pathlib, sys; pathlib.Path({str(flag)!r}).touch(); sys.exit(3)"
    codes = suite.run_at_once({"waits": ([sys.executable, "-c", waits], {}),
                               "writes": ([sys.executable, "-c", writes], {})})
    assert codes == {"waits": 0, "writes": 3}


def test_run_at_once_gives_each_command_its_environment() -> None:
    code = "import os, sys; sys.exit(0 if os.environ.get('ATEN_CPU_CAPABILITY') == 'default' else 1)"
    codes = suite.run_at_once({"other": ([sys.executable, "-c", code], suite.OTHER_CPU),
                               "here": ([sys.executable, "-c", code], {})})
    here = 0 if suite.os.environ.get("ATEN_CPU_CAPABILITY") == "default" else 1
    assert codes == {"other": 0, "here": here}
