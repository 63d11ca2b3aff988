# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: delegating to the removed plot helper helpers.equivalence_plots.failing_keys
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    from helpers import equivalence_plots
    return equivalence_plots.failing_keys(reference, candidate, tolerances)
