# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: delegating to a calibrate_tolerances in helpers.equivalence (there is none)
def calibrate_tolerances(reference_steps: list[dict], calibration_steps: list[dict]) -> dict[str, float]:
    """Per key (not step/, not bool): 4 * max(float32 eps, worst relative 2-norm error of the calibration run)."""
    return equivalence.calibrate_tolerances(reference_steps, calibration_steps)
