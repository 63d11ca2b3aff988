# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: the reciprocal, N n_r / T
def mean_of_means_factors(counts: list[int]) -> list[float]:
    """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
    total, world_size = sum(counts), len(counts)
    return [world_size * n / total for n in counts]
