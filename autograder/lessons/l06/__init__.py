"""Lesson 06, gradient sharding (ZeRO stage 2): the instructor side.

Grades the owner layout of a flat gradient (padded to ``N * ceil(numel / N)`` elements), the
reduce-scatter of the gradient into owner slices, clipping with one scalar all-reduce, the
sharded step against the replicated one, the ``Zero2Optimizer`` design exercise (against
float64 replicated training: state and bytes held, collectives sent) and the stage-2 memory
formula (:mod:`autograder.lessons.costs`). One module per job:

* :mod:`.drivers`: what grading may send into the kernel: nothing (``KERNEL_SIDE`` is empty;
  the checks run the drivers of :mod:`helpers.l06_gradient_sharding`);
* :mod:`.verdicts`: the references and the hidden checks (``check_*``) and their cases;
* :mod:`.stored`: the producers of chapter 06's stored data and ``STORED``.

Hidden tests import this package (``from autograder.lessons import l06 as ref``); it re-exports
what they, the tests and the store use.
"""
from .stored import STORED, stored_explorer, stored_layouts, stored_stage_memory
from .verdicts import (ZERO2_CASES, check_clipped, check_matches_replicated, check_owned_ranges,
                       check_reduce_scattered, check_zero2_kept_and_sent, check_zero2_memory, check_zero2_training,
                       expected_owned_slices, owned_range, shard_size)

__all__ = [
    "STORED", "ZERO2_CASES", "check_clipped", "check_matches_replicated", "check_owned_ranges",
    "check_reduce_scattered", "check_zero2_kept_and_sent", "check_zero2_memory", "check_zero2_training",
    "expected_owned_slices", "owned_range", "shard_size", "stored_explorer", "stored_layouts", "stored_stage_memory",
]
