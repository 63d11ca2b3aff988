# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: one loose fixed tolerance for every dtype (passes real float32 bugs)
def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in `dtype`."""
    return 0.05
