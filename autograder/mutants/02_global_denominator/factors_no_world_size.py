# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: forgets the 1/N of the mean over ranks: T / n_r
--- source/02_global_denominator/02_global_denominator.ipynb mean_of_means_factors
+++ mutant
@@ -1,4 +1,4 @@
 def mean_of_means_factors(counts: list[int]) -> list[float]:
     """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
-    total, world_size = sum(counts), len(counts)
-    return [total / (world_size * n) for n in counts]
+    total = sum(counts)
+    return [total / n for n in counts]
