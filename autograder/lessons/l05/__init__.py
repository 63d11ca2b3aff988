"""Lesson 05, optimizer-state sharding: the instructor side.

Grades the partition rule (largest parameter first to the least-loaded rank, against
``ZeroRedundancyOptimizer``'s own partition), the sharded Adam optimizer (against float64
``torch.optim.Adam`` and side by side with ``ZeroRedundancyOptimizer``: step counts, state
bytes per rank, in-place updates, the consolidated state dict), the flat-shard design exercise
(clipped, at most 8 ceil(P/N) bytes of state and N + 2 collectives per step) and the ZeRO
memory formulas (:mod:`autograder.lessons.costs`). One module per job:

* :mod:`.drivers`: what grading may send into the kernel, the hidden models
  :class:`IntermittentMLP` and :func:`idle_mlp`; its ``KERNEL_SIDE`` declares them;
* :mod:`.verdicts`: the references and the hidden checks (``check_*``) and their cases;
* :mod:`.stored`: the producers of chapter 05's stored data, ``STORED`` and ``STORED_ROUNDING``.

Hidden tests import this package (``from autograder.lessons import l05 as ref``); it re-exports
what they, the tests and the store use.
"""
from .drivers import IntermittentMLP
from .stored import STORED, STORED_ROUNDING, VISIBLE_ADAM
from .verdicts import (BIG_PARTITION, FLAT_3, FLAT_BIG, FLAT_CASES, FLAT_SUBGROUP, MIN_WORLD_CASES,
                       PARTITION_CASES, ZERO1_CASES, adam_reference, assert_step_counts, check_consolidated,
                       check_flat_matches_adam, check_flat_measured, check_in_place,
                       check_intermittent_matches_zero, check_matches_adam, check_matches_zero,
                       check_min_world_size, check_partition_alone, check_partition_on_ranks, check_state_bytes,
                       check_zero1_bytes_per_rank, partition, zero_owners_on_rank)


__all__ = [
    "BIG_PARTITION", "FLAT_3", "FLAT_BIG", "FLAT_CASES", "FLAT_SUBGROUP", "IntermittentMLP", "MIN_WORLD_CASES",
    "PARTITION_CASES", "STORED", "STORED_ROUNDING", "VISIBLE_ADAM", "ZERO1_CASES", "adam_reference",
    "assert_step_counts", "check_consolidated", "check_flat_matches_adam", "check_flat_measured", "check_in_place",
    "check_intermittent_matches_zero", "check_matches_adam", "check_matches_zero", "check_min_world_size",
    "check_partition_alone", "check_partition_on_ranks", "check_state_bytes", "check_zero1_bytes_per_rank",
    "partition", "zero_owners_on_rank",
]
