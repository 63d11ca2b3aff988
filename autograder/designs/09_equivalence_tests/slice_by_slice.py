# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# design: no consolidation: walks each rank's slice against the reference's matching slice, accumulating squared error and squared reference norm per tensor in float64
def compare_sharded(reference: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]],
                    layout: list[tuple[str, list[int]]], tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` that the sharded update state (one dict per rank) does not match."""
    size = -(-sum(torch.Size(shape).numel() for _, shape in layout) // len(shards))
    differing = set()
    for key in ("loss", "clip_coef", "mask"):
        for shard in shards:
            c, r = shard.get(key), reference[key]
            if c is None or c.shape != r.shape:
                differing.add(key)
            elif r.dtype == torch.bool:
                if not torch.equal(c.bool(), r):
                    differing.add(key)
            elif not (c.double() - r.double()).norm() <= tolerances[key] * r.double().norm() + 1e-12:
                differing.add(key)
    for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
        broken = any(family not in shard or shard[family].shape != (size,) for shard in shards)
        start = 0
        for name, _ in layout:
            key = f"{family}/{name}"
            r = reference[key].double().flatten()
            if broken:
                differing.add(key)
                start += r.numel()
                continue
            error2 = torch.zeros((), dtype=torch.float64)
            lo, hi = start, start + r.numel()
            while lo < hi:                         # one slice of one rank at a time
                rank, at = divmod(lo, size)
                take = min(hi - lo, size - at)
                piece = shards[rank][family][at:at + take].double()
                error2 = error2 + ((piece - r[lo - start:lo - start + take]) ** 2).sum()
                lo += take
            if not error2.sqrt() <= tolerances[key] * r.norm() + 1e-12:
                differing.add(key)
            start += r.numel()
    start = 0
    for name, shape in layout:
        count, key = torch.Size(shape).numel(), f"step/{name}"
        for rank in range(start // size, -(-(start + count) // size)):
            step = shards[rank].get("step")
            if step is None or step.shape != reference[key].shape or not torch.equal(step.double(), reference[key].double()):
                differing.add(key)
        start += count
    return sorted(differing)
