# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: the reciprocal, N n_r / T
--- source/02_global_denominator/02_global_denominator.ipynb mean_of_means_factors
+++ mutant
@@ -1,4 +1,4 @@
 def mean_of_means_factors(counts: list[int]) -> list[float]:
     """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
     total, world_size = sum(counts), len(counts)
-    return [total / (world_size * n) for n in counts]
+    return [world_size * n / total for n in counts]
