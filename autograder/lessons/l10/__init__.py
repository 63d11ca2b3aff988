"""Lesson 10, worker failure and restart: the instructor side, one module per job.

It grades a coherent checkpoint (per-rank files, a commit marker, the latest committed step agreed on load,
round trips bit for bit, membership changes, crashes at every point of a save, stale directory listings), a
resumable training loop (killed, stopped and restarted on as many or on other numbers of ranks), the
uneven-input loop with an all-reduced has-data flag, re-sharding per-owner optimizer state, and Young's and
Daly's checkpoint intervals with the expected lost time.

* :mod:`.drivers`: what grading may send into the kernel, the per-rank drivers of the checkpoint and elastic
  restart checks; its ``KERNEL_SIDE`` declares them;
* :mod:`.verdicts`: the references (the checkpoint, the training loops, the interval formulas, single-process
  float64 runs) and the ``check_*`` functions the hidden tests call (``ref.check_*``), with their cases;
* :mod:`.stored`: the producers of chapter 10's stored data, ``STORED`` and ``STORED_ROUNDING``.

Hidden tests import this package (``from autograder.lessons import l10 as ref``); it re-exports what they,
the tests and the store use.
"""
from .stored import STORED, STORED_ROUNDING
from .verdicts import (
    MARKER, check_crashes, check_elastic, check_intervals, check_membership_load, check_nothing_committed,
    check_reshard, check_restart_after_kill, check_round_trip, check_stale_listing, check_stop_and_resume,
    check_uneven, daly_interval, expected_lost_time, load_checkpoint, reshard_optimizer_state, save_checkpoint,
    step_dir, train_resumable, train_uneven, young_interval)

__all__ = [
    "MARKER", "STORED", "STORED_ROUNDING", "check_crashes", "check_elastic", "check_intervals",
    "check_membership_load", "check_nothing_committed", "check_reshard", "check_restart_after_kill",
    "check_round_trip", "check_stale_listing", "check_stop_and_resume", "check_uneven", "daly_interval",
    "expected_lost_time", "load_checkpoint", "reshard_optimizer_state", "save_checkpoint", "step_dir",
    "train_resumable", "train_uneven", "young_interval",
]
