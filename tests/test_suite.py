"""tests/suite.py, what ``make test`` runs: every part's failure fails the whole, 'no tests' included."""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

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
    monkeypatch.setattr(suite, "pytest_beside_check",
                        lambda jobs, budget: (suite.pytest("-m", "not alone"), fake.exits.get("course check", 0)))
    return fake


def test_all_parts_pass(commands: Commands, capsys) -> None:
    assert suite.main([]) == 0
    assert commands.ran[:4] == ["autograder release --check", "autograder store --check",
                                "autograder store --check as on another CPU", "ruff check ."]
    assert commands.ran[4].endswith("-m not alone") and commands.ran[6].endswith("-m alone and not load")
    assert "--nbval-lax" in commands.ran[5] and commands.ran[5].endswith("/notebooks")  # the chapters, before the book
    assert "all parts passed" in capsys.readouterr().out


@pytest.mark.parametrize("part", ["release --check", "store --check", "as on another CPU", "ruff check .",
                                  "-m not alone", "course check", "/notebooks", "-m alone and not load"])
def test_a_failing_part_fails_the_suite(commands: Commands, part: str) -> None:
    commands.exits[part] = 1
    assert suite.main([]) == 1


def test_no_tests_collected_is_a_failure(commands: Commands, capsys) -> None:
    commands.exits["-m alone and not load"] = suite.NO_TESTS_COLLECTED
    assert suite.main([]) == 1
    out = capsys.readouterr().out
    assert "collected no tests: failing" in out and "FAILED: pytest -m alone" in out


def test_run_at_once_runs_the_commands_together_and_returns_each_exit_status(tmp_path) -> None:
    flag = tmp_path / "second-started"
    # The first waits (at most 60 s) for a file only the second writes: run one after the other, it exits 1.
    waits = (f"import pathlib, sys, time\nfor _ in range(1200):\n"
             f"    if pathlib.Path({str(flag)!r}).exists(): sys.exit(0)\n    time.sleep(0.05)\nsys.exit(1)")
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
