# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: skipping the hard part: each family's whole flat buffer compared at once (one norm, its loosest tolerance), every key of a failing family reported
def compare_sharded(reference: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]],
                    layout: list[tuple[str, list[int]]], tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` that the sharded update state (one dict per rank) does not match."""
    total = sum(torch.Size(shape).numel() for _, shape in layout)
    differing = set()
    for key in ("loss", "clip_coef", "mask"):
        for shard in shards:
            differing.update(compare_update_states({key: reference[key]}, {key: shard.get(key)}, tolerances))
    for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
        keys = [f"{family}/{name}" for name, _ in layout]
        ref_flat = torch.cat([reference[k].double().flatten() for k in keys])
        try:
            flat = torch.cat([shard[family].double() for shard in shards])[:total]
        except KeyError:
            differing.update(keys)
            continue
        if flat.shape != ref_flat.shape or not (flat - ref_flat).norm() <= max(tolerances[k] for k in keys) * ref_flat.norm() + 1e-12:
            differing.update(keys)
    for name, _ in layout:
        if any(not torch.equal(shard["step"].double(), reference[f"step/{name}"]) for shard in shards):
            differing.add(f"step/{name}")
    return sorted(differing)
