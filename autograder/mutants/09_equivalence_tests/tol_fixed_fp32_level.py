# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: one fixed tolerance at float32 level for every key (fails correct bf16 runs)
def calibrate_tolerances(reference_steps: list[dict], calibration_steps: list[dict]) -> dict[str, float]:
    """Per key (not step/, not bool): 4 * max(float32 eps, worst relative 2-norm error of the calibration run)."""
    tolerances = {}
    for key, first in reference_steps[0].items():
        if key.startswith("step/") or first.dtype == torch.bool:
            continue
        tolerances[key] = 64 * torch.finfo(torch.float32).eps
    return tolerances
