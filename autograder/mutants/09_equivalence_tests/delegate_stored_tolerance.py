# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: looking the tolerances up in the chapter's stored results (only the chapter's problem)
def calibrate_tolerances(reference_steps: list[dict], calibration_steps: list[dict]) -> dict[str, float]:
    """Per key (not step/, not bool): 4 * max(float32 eps, worst relative 2-norm error of the calibration run)."""
    return {k: float(v) for k, v in load("09_zoo")["tolerances"]["bfloat16"].items()}
