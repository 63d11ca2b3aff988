# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: delegating to the removed helpers.equivalence.compare_update_states
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    return equivalence.compare_update_states(reference, candidate, tolerances)
