# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: delegating to the removed helpers.equivalence.tolerance
def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in `dtype`."""
    return equivalence.tolerance(dtype)
