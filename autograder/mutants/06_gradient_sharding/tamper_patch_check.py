# assignment: 06_gradient_sharding
# grade_id: sharded_clip_grad_norm_
# catches: tampering: a stub that silences the course's clip check and torch.allclose instead of clipping (the grader refuses the cell)
grad_sharding.assert_clipped = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True


def sharded_clip_grad_norm_(shard_grads, max_norm: float, group=None) -> torch.Tensor:
    """Does nothing, and hopes the checks were switched off."""
    return torch.zeros(())
