"""The course's lessons: one registry that every part reads instead of a list kept by hand.

A lesson is found by its number. :data:`LESSONS` gives its slug and title; every file of lesson
``NN`` follows from them (:class:`Lesson` names each one), and ``tests/test_lessons.py`` checks
that they exist and that nothing belongs to no lesson. Readers: the ranks' preload
(:mod:`helpers.runtime.cluster`), ``python -m helpers.launch``, ``python -m autograder store``
and ``check``, the book's lesson list and the README's lesson table (by test).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the course (or student copy) root, which holds helpers/


@dataclass(frozen=True)
class Lesson:
    """One lesson; ``stem`` (``"03_gradient_buckets"``) names its chapter and its assignment."""

    number: int
    slug: str
    title: str  # the chapter's first heading, without its "3. " number

    @property
    def nn(self) -> str:
        """The two-digit number, ``"03"``."""
        return f"{self.number:02d}"

    @property
    def stem(self) -> str:
        """``NN_slug``: the chapter's file name, the assignment's name and its folders."""
        return f"{self.nn}_{self.slug}"

    @property
    def package(self) -> str:
        """The student-side package: the lesson's code, ``.plots`` (figures), ``.launch`` (torchrun)."""
        return f"helpers.l{self.nn}_{self.slug}"

    @property
    def grader(self) -> str:
        """The instructor-side package: ``drivers`` (kernel side), ``verdicts`` (references, checks), ``stored``."""
        return f"autograder.lessons.l{self.nn}"

    @property
    def chapter(self) -> Path:
        return Path("notebooks") / f"{self.stem}.ipynb"

    @property
    def source(self) -> Path:
        """The assignment with solutions and hidden tests (nbgrader's source)."""
        return Path("source") / self.stem / f"{self.stem}.ipynb"

    @property
    def launch(self) -> str | None:
        """The torchrun script's module, if the lesson has one (``python -m helpers.launch``)."""
        path = ROOT / Path(*self.package.split(".")) / "launch.py"
        return f"{self.package}.launch" if path.is_file() else None


LESSONS: tuple[Lesson, ...] = (
    Lesson(1, "replicated_training", "Replicated training: agree on the gradient and the update"),
    Lesson(2, "global_denominator", "Unequal token counts require one global denominator"),
    Lesson(3, "gradient_buckets", "Gradient buckets: overlap follows a dependency schedule"),
    Lesson(4, "accumulation", "Accumulation changes communication, not the intended batch objective"),
    Lesson(5, "optimizer_state_sharding", "Optimizer-state sharding: assign update ownership explicitly"),
    Lesson(6, "gradient_sharding", "Gradient sharding: reduce globally and retain the owner slice"),
    Lesson(7, "parameter_sharding", "Parameter sharding: materialize only what the next operation needs"),
    Lesson(8, "prefetching", "Prefetching: hide communication only inside a live-memory budget"),
    Lesson(9, "equivalence_tests", "Equivalence tests: compare the update state, not only the loss"),
    Lesson(10, "worker_failure", "Worker failure: restart a coherent training state"),
)


def lesson(key: int | str) -> Lesson:
    """The lesson with number ``key`` (``3``, ``"3"``, ``"03"``), stem (``"03_gradient_buckets"``) or slug."""
    if isinstance(key, str) and key.isdigit():
        key = int(key)
    for item in LESSONS:
        if key in (item.number, item.stem, item.slug):
            return item
    raise KeyError(f"no lesson {key!r}; the lessons are {', '.join(item.stem for item in LESSONS)}")
