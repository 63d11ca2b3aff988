# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: looking the factors up in the chapter's stored results: only the explorer's grid and the chapter's counts are stored
--- source/02_global_denominator/02_global_denominator.ipynb mean_of_means_factors
+++ mutant
@@ -1,4 +1,3 @@
 def mean_of_means_factors(counts: list[int]) -> list[float]:
     """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
-    total, world_size = sum(counts), len(counts)
-    return [total / (world_size * n) for n in counts]
+    return denominator.stored_factors(counts)
