# assignment: 02_global_denominator
# grade_id: mean_of_means_factors
# catches: delegating to the factor calculator helpers.denominator used to export (no longer on the student side)
from helpers.denominator import mean_of_means_factors as _factors


def mean_of_means_factors(counts: list[int]) -> list[float]:
    """Per rank: (weight of one of its tokens under the mean of per-rank means) / (weight under the global mean)."""
    return _factors(counts)
