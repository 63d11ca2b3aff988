# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: every parameter's counter read from rank 0 only
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -17,7 +17,7 @@
     for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
         key = f"step/{name}"
         for rank in range(start // size, -(-(start + count) // size)):
-            candidate[key] = shards[rank].get("step")
+            candidate[key] = shards[0].get("step")
             differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
         start += count
     flat_keys = [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]
