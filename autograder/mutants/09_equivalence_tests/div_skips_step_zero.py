# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: step 0 skipped (counted as the resumed checkpoint)
def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
    """(first differing step, its differing keys), or None."""
    for step in range(1, len(reference_steps)):
        differing = compare_update_states(reference_steps[step], candidate_steps[step], tolerances)
        if differing:
            return step, differing
    return None
