# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: delegating to the removed helpers.equivalence.first_divergence
def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
    """(first differing step, its differing keys), or None."""
    return equivalence.first_divergence(reference_steps, candidate_steps, tolerances)
