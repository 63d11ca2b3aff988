"""Lesson 09, equivalence tests: the instructor side, one module per job.

It grades capturing an update state right after an optimizer step, calibrating per-key tolerances on a
known-correct run, comparing update states and finding the first diverging step (on synthetic cases and on
the zoo of runs, some of them broken), and the design exercise ``compare_sharded``, which judges a sharded
run's state against the float64 reference.

* :mod:`.drivers`: the driver grading sends into the student's kernel (``KERNEL_SIDE``);
* :mod:`.verdicts`: the references (update states, the reference checker, the float64 runs, the
  calibrated tolerances, the cases) and the ``check_*`` functions the hidden tests call (``ref.check_*``);
* :mod:`.stored`: the producers of the chapter's stored results (``STORED``, ``STORED_ROUNDING``).
"""
from .drivers import capture_steps
from .stored import (
    NEAR_TOLERANCE, OLD_ULPS, PORTABLE_KERNELS, STORED, STORED_ROUNDING, _ulps, checker_verdicts, resolved_error,
    resolved_ratio)
from .verdicts import (
    FLOOR, MARGIN, SAFETY, State, _layout, calibrate_tolerances, calibration_cases, capture_update_state,
    check_calibrate, check_capture, check_compare, check_first_divergence, check_sharded, check_zoo, compare_sharded,
    compare_update_states, exact, first_divergence, measured_zoo, other_model, precision_tolerances, reference_run,
    relative_error, run_zoo, sharded_cases, synthetic_cases, tensors_match, tolerance_ratio, update_state,
    zoo_sharded_cases)

__all__ = [
    "FLOOR", "MARGIN", "NEAR_TOLERANCE", "OLD_ULPS", "PORTABLE_KERNELS", "SAFETY", "STORED", "STORED_ROUNDING",
    "State", "_layout", "_ulps", "calibrate_tolerances", "calibration_cases", "capture_steps", "capture_update_state",
    "check_calibrate", "check_capture", "check_compare", "check_first_divergence", "check_sharded", "check_zoo",
    "checker_verdicts", "compare_sharded", "compare_update_states", "exact", "first_divergence", "measured_zoo",
    "other_model", "precision_tolerances", "reference_run", "relative_error", "resolved_error", "resolved_ratio",
    "run_zoo", "sharded_cases", "synthetic_cases", "tensors_match", "tolerance_ratio", "update_state",
    "zoo_sharded_cases",
]
