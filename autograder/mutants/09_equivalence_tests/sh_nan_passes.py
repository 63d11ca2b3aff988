# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: a tensor differs when its error exceeds the bound (NaN is never greater: a NaN shard passes)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -20,6 +20,10 @@
             candidate[key] = shards[rank].get("step")
             differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
         start += count
+    for key in [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]:
+        if key in candidate and (candidate[key].double() - reference[key]).norm() > tolerances[key] * reference[key].norm() + 1e-12:
+            differing.add(key)
+    return sorted(differing)
     flat_keys = [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]
     differing.update(compare_update_states({k: reference[k] for k in flat_keys}, candidate, tolerances))
     return sorted(differing)
