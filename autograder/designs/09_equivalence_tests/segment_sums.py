# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# design: the reference flattened into the run's padded buffer, each position tagged with its tensor; per-tensor squared norms by torch.bincount over all ranks at once
def compare_sharded(reference: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]],
                    layout: list[tuple[str, list[int]]], tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` that the sharded update state (one dict per rank) does not match."""
    counts = torch.tensor([torch.Size(shape).numel() for _, shape in layout])
    total, world = int(counts.sum()), len(shards)
    size = -(-total // world)
    padding = size * world - total
    # owner[i]: the layout index of the tensor flat position i belongs to (len(layout) for the padding)
    owner = torch.repeat_interleave(torch.arange(len(layout) + 1), torch.cat([counts, torch.tensor([padding])]))
    differing = set()
    for key in ("loss", "clip_coef", "mask"):
        r = reference[key]
        copies = [shard.get(key) for shard in shards]
        if any(c is None or c.shape != r.shape for c in copies):
            differing.add(key)
        elif r.dtype == torch.bool:
            differing.update(key for c in copies if not torch.equal(c.bool(), r))
        else:
            errors = torch.stack([(c.double() - r.double()).norm() for c in copies])
            if not bool((errors <= tolerances[key] * r.double().norm() + 1e-12).all()):
                differing.add(key)
    for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
        keys = [f"{family}/{name}" for name, _ in layout]
        if any(family not in shard or shard[family].shape != (size,) for shard in shards):
            differing.update(keys)
            continue
        ref_flat = torch.cat([reference[k].double().flatten() for k in keys] + [torch.zeros(padding, dtype=torch.float64)])
        diff = torch.cat([shard[family].double() for shard in shards]) - ref_flat
        error = torch.bincount(owner, weights=diff * diff, minlength=len(layout) + 1)[:len(layout)].sqrt()
        scale = torch.bincount(owner, weights=ref_flat * ref_flat, minlength=len(layout) + 1)[:len(layout)].sqrt()
        bound = torch.tensor([tolerances[k] for k in keys], dtype=torch.float64) * scale + 1e-12
        differing.update(k for k, ok in zip(keys, (error <= bound).tolist()) if not ok)
    steps = torch.stack([shard["step"].double().reshape(()) if "step" in shard else torch.tensor(float("nan"))
                         for shard in shards])
    first, last = torch.cumsum(counts, 0) - counts, torch.cumsum(counts, 0)
    for (name, _), lo, hi in zip(layout, first.tolist(), last.tolist()):
        held = steps[lo // size: -(-hi // size)]
        if not bool((held == reference[f"step/{name}"].double()).all()):
            differing.add(f"step/{name}")
    return sorted(differing)
