"""The registry of lessons (helpers.lessons) against the files: lesson NN's files follow from its number."""
from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import nbformat
import pytest

from helpers.lessons import LESSONS, lesson

ROOT = Path(__file__).resolve().parent.parent
NN = re.compile(r"^l?(\d\d)_")


def numbers_of(paths: list[Path]) -> set[str]:
    """The lesson numbers ``NN`` of names ``NN_...`` or ``lNN_...``."""
    return {NN.match(path.name)[1] for path in paths if NN.match(path.name)}


def test_lessons_are_numbered_one_to_ten_in_order() -> None:
    assert [item.number for item in LESSONS] == list(range(1, len(LESSONS) + 1))
    assert len({item.slug for item in LESSONS}) == len(LESSONS)


def test_lesson_is_found_by_number_stem_or_slug() -> None:
    assert lesson(3) is lesson("03") is lesson("03_gradient_buckets") is lesson("gradient_buckets")
    with pytest.raises(KeyError, match="no lesson"):
        lesson(11)


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.stem)
def test_every_file_of_a_lesson_is_where_its_number_says(item) -> None:
    assert (ROOT / item.chapter).is_file()
    assert (ROOT / item.source).is_file()
    assert (ROOT / "release" / item.stem / f"{item.stem}.ipynb").is_file()
    assert (ROOT / "autograder" / "mutants" / item.stem).is_dir()
    assert (ROOT / "autograder" / "designs" / item.stem).is_dir()
    assert item.stem in json.loads((ROOT / "autograder" / "cell_seconds.json").read_text())
    assert importlib.import_module(item.grader).__file__
    assert importlib.import_module(item.package).__file__ == str(ROOT / item.package.replace(".", "/") / "__init__.py")
    assert list((ROOT / "tests").glob(f"test_l{item.nn}_*.py")), f"no tests/test_l{item.nn}_*.py"


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.stem)
def test_title_is_the_chapters_first_heading(item) -> None:
    first = nbformat.read(ROOT / item.chapter, as_version=4).cells[0].source.splitlines()[0]
    assert first == f"# {item.number}. {item.title}"


def test_nothing_is_numbered_for_a_lesson_the_registry_lacks() -> None:
    known = {item.nn for item in LESSONS}
    places = [ROOT / "notebooks", ROOT / "source", ROOT / "release", ROOT / "autograder" / "mutants",
              ROOT / "autograder" / "designs", ROOT / "helpers" / "stored", ROOT / "helpers", ROOT / "tests"]
    for place in places:
        assert numbers_of(list(place.iterdir())) <= known, place
    stems = {item.stem for item in LESSONS}
    for place in places[:5]:
        assert {p.name.removesuffix(".ipynb") for p in place.iterdir() if NN.match(p.name)} <= stems, place
    packages = {p.name for p in (ROOT / "helpers").iterdir() if NN.match(p.name)}
    assert packages == {item.package.split(".")[1] for item in LESSONS}


def test_helpers_holds_the_three_parts_and_the_lessons() -> None:
    """The runtime, what every lesson shares, one package per lesson, the registry and the torchrun command."""
    names = {p.name for p in (ROOT / "helpers").iterdir() if p.name != "__pycache__"}
    parts = {"__init__.py", "lessons.py", "runtime", "shared", "launch", "stored"}
    assert names - parts == {item.package.split(".")[1] for item in LESSONS}


def test_readme_lesson_table_is_the_registry() -> None:
    rows = re.findall(r"^\| (\d\d) \| ([^|]+?) \| \[`(notebooks/[^`]+)`\]", (ROOT / "README.md").read_text(), re.M)
    assert [(nn, title, chapter) for nn, title, chapter in rows] == [
        (item.nn, item.title, str(item.chapter)) for item in LESSONS]


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.stem)
def test_hidden_tests_call_the_graders_check_functions(item) -> None:
    """One convention: a hidden test calls ``ref.check_*`` of the lesson's grader module (or reads its data)."""
    text = "\n".join(cell.source for cell in nbformat.read(ROOT / item.source, as_version=4).cells)
    grader = importlib.import_module(item.grader)
    called = set(re.findall(r"\bref\.(\w+)\(", text))
    assert called, "no hidden test calls the grader"
    assert all(hasattr(grader, name) for name in called), called
    assert not [name for name in called if name.startswith("assert_")], called
    assert [name for name in called if name.startswith("check_")]


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.stem)
def test_the_grader_is_split_by_job(item) -> None:
    """drivers (kernel side, declared in KERNEL_SIDE), verdicts (references, checks), stored (chapter data)."""
    folder = ROOT / item.grader.replace(".", "/")
    assert sorted(p.name for p in folder.glob("*.py")) == ["__init__.py", "drivers.py", "stored.py", "verdicts.py"]
    drivers = importlib.import_module(f"{item.grader}.drivers")
    assert set(drivers.KERNEL_SIDE) <= set(vars(drivers)), "KERNEL_SIDE names what drivers.py defines"
    assert not [name for name in vars(drivers) if name.startswith("check_")], "a verdict in drivers.py"
