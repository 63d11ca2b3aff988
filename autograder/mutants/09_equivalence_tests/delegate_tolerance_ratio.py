# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: building on the removed plot helpers tolerance_ratio / relative_error
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    from helpers import equivalence_plots
    return sorted(key for key, r in reference.items() if equivalence_plots.tolerance_ratio(
        r, candidate.get(key), 0.0 if key.startswith("step/") else tolerances[key]) > 1)
