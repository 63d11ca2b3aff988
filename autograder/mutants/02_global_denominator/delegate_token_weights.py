# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: dividing the per-token weights helpers.denominator.token_weights used to compute (no longer on the student side)
def mean_of_means_factors(counts: list[int]) -> list[float]:
    """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
    biased = denominator.token_weights(counts, "mean of means")
    fair = denominator.token_weights(counts, "global")
    return [b / f for b, f in zip(biased, fair)]
