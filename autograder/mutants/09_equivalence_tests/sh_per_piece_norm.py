# assignment: 09_equivalence_tests
# grade_id: compare_sharded
# catches: each rank's piece of a tensor judged alone at the tensor's tolerance (a small piece of an accurate tensor fails)
--- source/09_equivalence_tests/09_equivalence_tests.ipynb compare_sharded
+++ mutant
@@ -20,6 +20,17 @@
             candidate[key] = shards[rank].get("step")
             differing.update(compare_update_states({key: reference[key]}, candidate, tolerances))
         start += count
+    start = 0
+    for family in ("grad", "param", "exp_avg", "exp_avg_sq"):
+        for (name, _), count in zip(layout, counts):
+            key, r = f"{family}/{name}", reference[f"{family}/{name}"].double().flatten()
+            c = candidate.get(key)
+            for lo in range(start - start % size, start + count, size):
+                a, b = max(lo, start), min(lo + size, start + count)
+                if c is not None and not (c.double().flatten()[a - start:b - start] - r[a - start:b - start]).norm() <= tolerances[key] * r[a - start:b - start].norm() + 1e-12:
+                    differing.add(key)
+            start += count
+        start = 0
     flat_keys = [k for k in reference if k.split("/")[0] in ("grad", "param", "exp_avg", "exp_avg_sq")]
     differing.update(compare_update_states({k: reference[k] for k in flat_keys}, candidate, tolerances))
     return sorted(differing)
