# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: importing the instructor's reference checker from autograder.lessons.l09
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    from autograder.lessons.l09 import compare_update_states as reference_checker
    return reference_checker(reference, candidate, tolerances)
