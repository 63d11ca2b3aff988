# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: the padding counted as part of the last tensor (compared against zero)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -13,6 +13,9 @@
         if all(isinstance(p, torch.Tensor) and p.shape == (size,) for p in pieces):
             for (name, shape), piece in zip(layout, torch.cat(pieces).split(counts + [size * len(shards) - sum(counts)])):
                 candidate[f"{family}/{name}"] = piece.reshape(shape)
+            tail = torch.cat(pieces)[sum(counts) - counts[-1]:]
+            if tail[counts[-1]:].abs().sum() > 1e-12 * tail.norm():
+                candidate[f"{family}/{layout[-1][0]}"] = tail[:0]
     start = 0
     for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
         key = f"step/{name}"
