# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: building on the removed helpers.equivalence.tensors_match
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    return sorted(key for key, r in reference.items() if key not in candidate or not equivalence.tensors_match(
        r, candidate[key], 0.0 if key.startswith("step/") else tolerances[key]))
