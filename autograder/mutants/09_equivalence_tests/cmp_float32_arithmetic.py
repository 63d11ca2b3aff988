# assignment: 09_equivalence_tests
# grade_id: compare_update_states
# catches: computing in float32: counters above 2**24 (and errors below float32 rounding) vanish
def compare_update_states(reference: dict[str, torch.Tensor], candidate: dict[str, torch.Tensor],
                          tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` missing from `candidate` or differing beyond tolerances[key]."""
    differing = []
    for key, r in reference.items():
        c = candidate.get(key)
        if c is None or c.shape != r.shape:
            differing.append(key)
        elif key.startswith("step/") or r.dtype == torch.bool:
            if not torch.equal(c.float(), r.float()):
                differing.append(key)
        elif not (c.float() - r.float()).norm() <= tolerances[key] * r.float().norm() + 1e-12:
            differing.append(key)
    return sorted(differing)
