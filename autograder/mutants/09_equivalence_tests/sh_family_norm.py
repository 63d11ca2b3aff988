# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: skipping the hard part: each family's whole flat buffer compared at once (one norm, its loosest tolerance), every key of a failing family reported
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -1,25 +1,22 @@
 def compare_sharded(reference: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]],
                     layout: list[tuple[str, list[int]]], tolerances: dict[str, float]) -> list[str]:
     """Sorted keys of `reference` that the sharded update state (one dict per rank) does not match."""
-    counts = [torch.Size(shape).numel() for _, shape in layout]
-    size = -(-sum(counts) // len(shards))
+    total = sum(torch.Size(shape).numel() for _, shape in layout)
     differing = set()
-    for key in ("loss", "clip_coef", "mask"):        # every rank's copy
+    for key in ("loss", "clip_coef", "mask"):
         for shard in shards:
             differing.update(compare_update_states({key: reference[key]}, {key: shard.get(key)}, tolerances))
-    candidate = {}                                   # consolidate: each tensor from its elements on every rank
     for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
-        pieces = [shard.get(family) for shard in shards]
-        if all(isinstance(p, torch.Tensor) and p.shape == (size,) for p in pieces):
-            for (name, shape), piece in zip(layout, torch.cat(pieces).split(counts + [size * len(shards) - sum(counts)])):
-                candidate[f"{family}/{name}"] = piece.reshape(shape)
-    start = 0
-    for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
-        key = f"step/{name}"
-        for rank in range(start // size, -(-(start + count) // size)):
-            candidate[key] = shards[rank].get("step")
-            differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
-        start += count
-    flat_keys = [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]
-    differing.update(compare_update_states({k: reference[k] for k in flat_keys}, candidate, tolerances))
+        keys = [f"{family}/{name}" for name, _ in layout]
+        ref_flat = torch.cat([reference[k].double().flatten() for k in keys])
+        try:
+            flat = torch.cat([shard[family].double() for shard in shards])[:total]
+        except KeyError:
+            differing.update(keys)
+            continue
+        if flat.shape != ref_flat.shape or not (flat - ref_flat).norm() <= max(tolerances[k] for k in keys) * ref_flat.norm() + 1e-12:
+            differing.update(keys)
+    for name, _ in layout:
+        if any(not torch.equal(shard["step"].double(), reference[f"step/{name}"]) for shard in shards):
+            differing.add(f"step/{name}")
     return sorted(differing)
