# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: looking the factors up in the chapter's stored results: only the explorer's grid and the chapter's counts are stored
def mean_of_means_factors(counts: list[int]) -> list[float]:
    """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
    return denominator.stored_factors(counts)
