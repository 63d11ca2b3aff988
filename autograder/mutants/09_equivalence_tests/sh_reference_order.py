# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: flattening in the reference's (named_parameters) order, not the layout's
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -11,7 +11,7 @@
     for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
         pieces = [shard.get(family) for shard in shards]
         if all(isinstance(p, torch.Tensor) and p.shape == (size,) for p in pieces):
-            for (name, shape), piece in zip(layout, torch.cat(pieces).split(counts + [size * len(shards) - sum(counts)])):
+            for (name, shape), piece in zip(sorted(layout, key=lambda e: [k for k in reference if k.startswith("param/")].index("param/" + e[0])), torch.cat(pieces).split(counts + [size * len(shards) - sum(counts)])):
                 candidate[f"{family}/{name}"] = piece.reshape(shape)
     start = 0
     for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
