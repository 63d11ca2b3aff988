"""Lesson 04, accumulation: what grading may send into the kernel (``KERNEL_SIDE``), nothing else.

Nothing of this lesson's grader goes there: its hidden checks run the student-side driver
:func:`helpers.l04_accumulation.train_windows_on_rank` on the ranks.
"""
from __future__ import annotations

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE: frozenset[str] = frozenset()
