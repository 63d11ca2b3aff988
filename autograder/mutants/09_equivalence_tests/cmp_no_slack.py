# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: no absolute slack: ||c - r|| <= tol ||r|| (a zero reference tolerates no rounding at all)
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    differing = []
    for key, r in reference.items():
        c = candidate.get(key)
        if c is None or c.shape != r.shape:
            differing.append(key)
        elif key.startswith("step/") or r.dtype == torch.bool:
            if not torch.equal(c.to(r.dtype), r):
                differing.append(key)
        elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm():
            differing.append(key)
    return sorted(differing)
