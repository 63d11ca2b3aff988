# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: delegating to the removed helpers.equivalence.compare_update_states
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          dtype: torch.dtype) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerance(dtype)."""
    return equivalence.compare_update_states(reference, candidate, dtype)
