# assignment: 09_equivalence_tests
# grade_id: tolerance
# catches: one fixed tolerance at float32 level for every dtype (fails correct bf16 runs)
def tolerance(dtype: torch.dtype) -> float:
    """Relative 2-norm tolerance for a run computed in `dtype`."""
    return 1e-5
