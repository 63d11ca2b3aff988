"""Lesson 02, one global denominator: the instructor side, one module per job.

It grades the valid-token count of a window, the loss over one global denominator and its gradients under DDP,
training over windows (also on a subgroup), and the mean-of-means factors.

* :mod:`.drivers`: the drivers grading sends into the student's kernel (``KERNEL_SIDE``);
* :mod:`.verdicts`: the float64 references and the ``check_*`` functions the hidden tests call (``ref.check_*``);
* :mod:`.stored`: the producers of the chapter's stored results (``STORED``, ``STORED_ROUNDING``).
"""
from .drivers import padded_loss_and_gradient
from .stored import CHAPTER_COUNTS, STORED, STORED_ROUNDING, VISIBLE_LOSS_SEED, VISIBLE_LOSS_WINDOW, token_factors
from .verdicts import (
    check_count, check_ddp_gradients, check_factors, check_loss_value, check_training, check_training_in_subgroup,
    global_mean_gradients, masked_loss_sum, mean_of_means_factors, mean_of_means_gradients, padded_window,
    sgd_reference, window_count)

__all__ = [
    "CHAPTER_COUNTS", "STORED", "STORED_ROUNDING", "VISIBLE_LOSS_SEED", "VISIBLE_LOSS_WINDOW", "check_count",
    "check_ddp_gradients", "check_factors", "check_loss_value", "check_training", "check_training_in_subgroup",
    "global_mean_gradients", "masked_loss_sum", "mean_of_means_factors", "mean_of_means_gradients",
    "padded_loss_and_gradient", "padded_window", "sgd_reference", "token_factors", "window_count",
]
