# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: flattening in the reference's (named_parameters) order, not the layout's
def compare_sharded(reference: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]],
                    layout: list[tuple[str, list[int]]], tolerances: dict[str, float]) -> list[str]:
    """Sorted keys of `reference` that the sharded update state (one dict per rank) does not match."""
    counts = [torch.Size(shape).numel() for _, shape in layout]
    size = -(-sum(counts) // len(shards))
    differing = set()
    for key in ("loss", "clip_coef", "mask"):        # every rank's copy
        for shard in shards:
            differing.update(compare_update_states({key: reference[key]}, {key: shard.get(key)}, tolerances))
    candidate = {}                                   # consolidate: each tensor from its elements on every rank
    for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
        pieces = [shard.get(family) for shard in shards]
        if all(isinstance(p, torch.Tensor) and p.shape == (size,) for p in pieces):
            for (name, shape), piece in zip(sorted(layout, key=lambda e: [k for k in reference if k.startswith("param/")].index("param/" + e[0])), torch.cat(pieces).split(counts + [size * len(shards) - sum(counts)])):
                candidate[f"{family}/{name}"] = piece.reshape(shape)
    start = 0
    for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
        key = f"step/{name}"
        for rank in range(start // size, -(-(start + count) // size)):
            candidate[key] = shards[rank].get("step")
            differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
        start += count
    flat_keys = [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]
    differing.update(compare_update_states({k: reference[k] for k in flat_keys}, candidate, tolerances))
    return sorted(differing)

