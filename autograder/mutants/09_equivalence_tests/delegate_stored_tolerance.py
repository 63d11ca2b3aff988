# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: looking the tolerance up in the chapter's stored results (only the dtypes the chapter shows)
def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in `dtype`."""
    return load("09_zoo")["tolerance"][str(dtype).removeprefix("torch.")]
