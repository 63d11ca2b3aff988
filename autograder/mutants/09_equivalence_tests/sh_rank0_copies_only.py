# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: the loss, clip coefficient and mask of rank 0 only (a rank reporting its local loss passes)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -5,7 +5,7 @@
     size = -(-sum(counts) // len(shards))
     differing = set()
     for key in ("loss", "clip_coef", "mask"):        # every rank's copy
-        for shard in shards:
+        for shard in shards[:1]:
             differing.update(compare_update_states({key: reference[key]}, {key: shard.get(key)}, tolerances))
     candidate = {}                                   # consolidate: each tensor from its elements on every rank
     for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
