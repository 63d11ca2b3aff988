"""store --check compares rounding errors as rounding errors, everything else exactly (autograder.store)."""
from __future__ import annotations

from autograder.store import FLOAT32_RESULTS, Rounding, agree


def test_exact_by_default():
    assert agree({"a": [1.0, 2]}, {"a": [1.0, 2]}, Rounding()) is None
    assert agree({"a": [1.0, 2]}, {"a": [1.0000001, 2]}, Rounding()) == "/a[0]: 1.0 != 1.0000001"
    assert agree({"a": 1}, {"a": 1.0}, Rounding()) is not None  # an int is not a float


def test_rounding_errors_agree_within_their_factor_only():
    r = Rounding(factor=4.0)
    assert agree([9.76e-08, 0.0], [5.0e-08, 0.0], r) is None
    assert "beyond a factor 4" in agree([9.76e-08], [5.0e-07], r)  # a real regression: 5x larger
    assert agree([1e-7], [-1e-7], r) is not None
    assert agree({"verdict": "pass"}, {"verdict": "fail"}, r) is not None  # text stays exact


def test_cpu_dependent_paths_masks_and_one_step():
    r = Rounding(cpu_dependent=(r"/v/x",), masked=r"sha256 [0-9a-f]+", one_step=(r"/i\[\d+\]",))
    assert agree({"v": {"x": None, "y": 1}}, {"v": {"x": 1, "y": 1}}, r) is None
    assert agree({"v": {"x": None, "y": 1}}, {"v": {"x": None, "y": 2}}, r) is not None
    assert agree(["params sha256 77aa"], ["params sha256 0b1c"], r) is None
    assert agree({"i": [1, 2]}, {"i": [2, 1]}, r) is None and agree({"i": [0]}, {"i": [2]}, r) is not None


def test_float32_results_agree_within_their_last_digits_only():
    r = FLOAT32_RESULTS
    assert agree([0.117211027, 0.00058746694], [0.117211074, 0.000587510054], r) is None  # measured: another SIMD level
    assert "beyond rel_tol" in agree([0.117211027], [0.117221027], r)  # a change of the code moves the 5th digit
    assert agree({"step": 3}, {"step": 4}, r) is not None  # integers stay exact
