"""Lesson 01, replicated training: the instructor side, one module per job.

It grades hand-written gradient averaging, parameter broadcast and replica checks (on the default group
and on a subgroup), the ring all-reduce byte count, and the design exercise ``ReplicatedModel`` against
float64 full-batch SGD and real ``DistributedDataParallel``.

* :mod:`.drivers`: the hidden models and drivers grading sends into the student's kernel (``KERNEL_SIDE``);
* :mod:`.verdicts`: the references and the ``check_*`` functions the hidden tests call (``ref.check_*``);
* :mod:`.stored`: the producers of the chapter's stored results (``STORED``, ``STORED_ROUNDING``).

Lessons 02, 03 and 07 reuse :func:`in_subgroup`, :func:`run_in_subgroup`, :func:`full_batch_gradients` and
:func:`sgd_reference` from here.
"""
from ..costs import ring_allreduce_bytes
from .drivers import UnusedHead, in_subgroup, train_wrapped_on_rank
from .stored import STORED, STORED_ROUNDING
from .verdicts import (
    ALIGNED_CASES, ALIGNED_SUBGROUP_CASES, RING_CASES, check_average_full_batch, check_average_in_subgroup,
    check_average_synthetic, check_broadcast, check_broadcast_all_buffers, check_broadcast_in_subgroup,
    check_replicas_aligned, check_replicas_aligned_all_buffers, check_replicas_aligned_in_subgroup,
    check_replicated_construction, check_replicated_gradients, check_replicated_training,
    check_ring_allreduce_bytes, full_batch_gradients, real_ddp, run_in_subgroup, sgd_reference)

__all__ = [
    "ALIGNED_CASES", "ALIGNED_SUBGROUP_CASES", "RING_CASES", "STORED", "STORED_ROUNDING", "UnusedHead",
    "check_average_full_batch", "check_average_in_subgroup", "check_average_synthetic", "check_broadcast",
    "check_broadcast_all_buffers", "check_broadcast_in_subgroup", "check_replicas_aligned",
    "check_replicas_aligned_all_buffers", "check_replicas_aligned_in_subgroup", "check_replicated_construction",
    "check_replicated_gradients", "check_replicated_training", "check_ring_allreduce_bytes", "full_batch_gradients",
    "in_subgroup", "real_ddp", "ring_allreduce_bytes", "run_in_subgroup", "sgd_reference", "train_wrapped_on_rank",
]
