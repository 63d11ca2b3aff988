# assignment: 02_global_denominator
# grade_id: global_token_loss
# catches: NaN on a rank without valid tokens (local mean 0/0, then reweighted by the local share)
def global_token_loss(token_losses: torch.Tensor, mask: torch.Tensor, global_count: int,
                      world_size: int = 1) -> torch.Tensor:
    """(world_size / global_count) * sum of the valid token losses; 0 (zero gradient) if there are none."""
    local_count = mask.sum()
    local_mean = token_losses[mask].sum() / local_count
    return local_mean * local_count * world_size / max(global_count, 1)
