# assignment: 02_global_denominator
# grade_id: global_token_loss
# catches: delegating the masked sum to helpers.denominator.masked_loss_sum (no longer on the student side)
def global_token_loss(token_losses: torch.Tensor, mask: torch.Tensor, global_count: int,
                      world_size: int = 1) -> torch.Tensor:
    """(world_size / global_count) * sum of the valid token losses; 0 (zero gradient) if there are none."""
    return denominator.masked_loss_sum(token_losses, mask) * (world_size / max(global_count, 1))
