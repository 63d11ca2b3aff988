# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: forgets the 1/N of the mean over ranks: T / n_r
def mean_of_means_factors(counts: list[int]) -> list[float]:
    """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
    total = sum(counts)
    return [total / n for n in counts]
