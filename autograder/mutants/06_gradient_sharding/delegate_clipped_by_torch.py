# assignment: 06_gradient_sharding
# grade_id: sharded_clip_grad_norm_
# catches: gathering every rank's shards and letting the visible check's clip_grad_norm_ wrapper (helpers.grad_sharding.clipped_by_torch) clip them: the whole gradient travels instead of one number
def sharded_clip_grad_norm_(shard_grads, max_norm: float, group=None) -> torch.Tensor:
    """Clip this rank's shards in place by the global 2-norm over `group`; return that norm."""
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, [g.detach().clone() for g in shard_grads], group=group)
    norm, clipped = grad_sharding.clipped_by_torch(everyone, max_norm)
    for g, c in zip(shard_grads, clipped[dist.get_rank(group)]):
        g.copy_(c)
    return torch.tensor(norm, dtype=torch.float32)
