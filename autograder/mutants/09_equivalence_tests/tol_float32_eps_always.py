# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: float32's epsilon whatever the dtype
def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in `dtype`."""
    return 64 * torch.finfo(torch.float32).eps
