"""Lesson 07, parameter sharding (FULL_SHARD): the grader's side, one module per job.

The hidden tests of ``source/07_parameter_sharding`` (``from autograder.lessons import l07 as ref``)
grade the FULL_SHARD schedule (also against the collectives real FSDP2 issues), its ring traffic
per step (also against FSDP2's measured bytes), which unit owns a parameter (nested units, tied
weights), a fully-sharded unit trained on gloo ranks (also in a subgroup), and a loop that trains
through the shards. The student copy of the course does not contain this package.

- :mod:`.drivers`: what grading may send into the student's kernel (its ``KERNEL_SIDE``): a hidden
  model, the driver that steps a unit's shards by hand, the stand-in unit that records a loop.
- :mod:`.verdicts`: the references (schedule, traffic, owners, float64 SGD) and the ``check_*``
  verdicts; they stay in the grader.
- :mod:`.stored`: producers of the chapter's stored results (``STORED``, ``STORED_ROUNDING``).
"""
from .drivers import RecordingUnit, block_mlp, step_shards_by_hand
from .stored import (STORED, STORED_ROUNDING, VISIBLE_TRAIN, VISIBLE_UNIT, availability, chapter_results,
                     explorer_results, live_parameter_bytes, split_params)
from .verdicts import (assert_sharded_training, check_matches_fsdp2, check_schedule, check_traffic,
                       check_traffic_measured, check_train_full_shard, check_unit_in_subgroup, check_unit_parameters,
                       check_unit_step, check_unit_trains, fsdp_traffic_bytes, full_shard_schedule, sgd_full_batch,
                       unit_parameters)

__all__ = [
    "RecordingUnit", "block_mlp", "step_shards_by_hand",
    "STORED", "STORED_ROUNDING", "VISIBLE_TRAIN", "VISIBLE_UNIT", "availability", "chapter_results",
    "explorer_results", "live_parameter_bytes", "split_params",
    "assert_sharded_training", "check_matches_fsdp2", "check_schedule", "check_traffic", "check_traffic_measured",
    "check_train_full_shard", "check_unit_in_subgroup", "check_unit_parameters", "check_unit_step",
    "check_unit_trains", "fsdp_traffic_bytes", "full_shard_schedule", "sgd_full_batch", "unit_parameters",
]
