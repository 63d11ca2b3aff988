# assignment: 02_global_denominator
# grade_id: global_token_loss
# catches: returns a detached constant 0 when the window has no token (backward fails, DDP ranks cannot join)
def global_token_loss(token_losses: torch.Tensor, mask: torch.Tensor, global_count: int,
                      world_size: int = 1) -> torch.Tensor:
    """(world_size / global_count) * sum of the valid token losses; 0 (zero gradient) if there are none."""
    if global_count == 0 or not mask.any():
        return torch.zeros(())
    return token_losses[mask].sum() * world_size / global_count
