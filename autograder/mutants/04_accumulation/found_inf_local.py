# assignment: 04_accumulation
# grade_id: found_inf_global
# catches: local-only inf check (each rank answers from its own gradients)
def found_inf_global(parameters, group=None) -> bool:
    """True on every rank of `group` iff some rank has a non-finite element in some .grad."""
    return any(p.grad is not None and not torch.isfinite(p.grad).all() for p in parameters)
