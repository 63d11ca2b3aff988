# assignment: 09_equivalence_tests
# grade_id: capture_update_state
# catches: delegating to the removed helpers.equivalence.reference_capture
def capture_update_state(model: nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
                         clip_coef: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Float64 copies of everything the step read or wrote (mask as bool)."""
    return equivalence.reference_capture(model, optimizer, loss, clip_coef, mask)
