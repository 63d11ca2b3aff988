# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: a counter off on one rank reported for every parameter, not only those the rank holds
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -16,7 +16,7 @@
     start = 0
     for (name, _), count in zip(layout, counts):     # the counter of every rank holding an element of `name`
         key = f"step/{name}"
-        for rank in range(start // size, -(-(start + count) // size)):
+        for rank in range(len(shards)):
             candidate[key] = shards[rank].get("step")
             differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
         start += count
