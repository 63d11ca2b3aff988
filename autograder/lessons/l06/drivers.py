"""Lesson 06's drivers: what grading may send into the student's kernel, which is nothing.

Its hidden checks run the drivers of :mod:`helpers.l06_gradient_sharding`, which the kernel
already has; nothing of the grader travels.
"""
from __future__ import annotations

# What grading ships into the kernel (drivers, stand-ins, hidden models): never a reference or an
# expected value. The course check fails a source grading that ships anything else of this module.
KERNEL_SIDE: frozenset[str] = frozenset()
