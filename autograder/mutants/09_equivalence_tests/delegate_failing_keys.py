# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: delegating to the removed plot helper helpers.equivalence_plots.failing_keys
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          dtype: torch.dtype) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerance(dtype)."""
    from helpers import equivalence_plots
    return equivalence_plots.failing_keys(reference, candidate, dtype)
