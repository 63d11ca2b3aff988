# assignment: 09_equivalence_tests
# grade_id: first_divergence
# catches: building on the removed plot helper helpers.equivalence_plots.checker_verdicts
def first_divergence(reference_steps: list[dict], candidate_steps: list[dict], tolerances: dict[str, float]):
    """(first differing step, its differing keys), or None."""
    from helpers import equivalence_plots
    verdicts = equivalence_plots.checker_verdicts(reference_steps, {"run": (tolerances, candidate_steps)})
    step = verdicts["update state (reference)"]["run"]
    return None if step is None else (step, compare_update_states(reference_steps[step], candidate_steps[step], tolerances))
