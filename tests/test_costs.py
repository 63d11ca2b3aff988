"""The calculators reproduce the formulas and the published tables they claim to."""
from __future__ import annotations

import pytest

from autograder.lessons import costs

GB = 1e9  # the ZeRO paper's tables are in 10^9 bytes: 7.5B params x 16 bytes = "120 GB"


def test_ring_allreduce_is_reduce_scatter_plus_allgather() -> None:
    for n in (1, 2, 3, 4, 8, 64):
        assert costs.ring_allreduce_bytes(1000, 4, n) == pytest.approx(
            costs.ring_reduce_scatter_bytes(1000, 4, n) + costs.ring_allgather_bytes(1000, 4, n)
        )
    assert costs.ring_allreduce_bytes(1000, 4, 1) == 0
    assert costs.ring_allreduce_bytes(1000, 4, 4) == 6000.0  # 2 * 3/4 * 4000


@pytest.mark.parametrize("bad", [dict(world_size=0), dict(bytes_per_element=0), dict(num_elements=-1)])
def test_calculators_reject_impossible_inputs(bad: dict) -> None:
    args = dict(num_elements=10, bytes_per_element=4, world_size=2) | bad
    with pytest.raises(ValueError):
        costs.ring_allreduce_bytes(**args)


# ZeRO paper (Rajbhandari et al., SC 2020), Figure 1: Psi = 7.5B, K = 12, N_d = 64.
ZERO_FIGURE_1_GB = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}


@pytest.mark.parametrize("stage, printed", ZERO_FIGURE_1_GB.items())
def test_zero_paper_figure_1_per_device_memory(stage: int, printed: float) -> None:
    value = costs.adam_memory_bytes(7_500_000_000, 64, stage) / GB
    assert round(value, 1) == printed


# ZeRO paper, Table 1 ("per-device memory consumption of different optimizations in
# ZeRO as a function of DP degree"), columns P_os, P_os+g, P_os+g+p for the 7.5B, 128B
# and 1T models, in GB. The paper rounds small values to 3 significant figures and
# drops the fraction of large ones (4187.5 is printed 4187), so each value is checked to
# within one unit of its last printed digit.
ZERO_TABLE_1_GB = {
    # DP: (7.5B: os, os+g, os+g+p), (128B: ...), (1T: ...)
    1: ((120, 120, 120), (2048, 2048, 2048), (16000, 16000, 16000)),
    4: ((52.5, 41.3, 30), (896, 704, 512), (7000, 5500, 4000)),
    16: ((35.6, 21.6, 7.5), (608, 368, 128), (4750, 2875, 1000)),
    64: ((31.4, 16.6, 1.88), (536, 284, 32), (4187, 2218, 250)),
    256: ((30.4, 15.4, 0.47), (518, 263, 8), (4046, 2054, 62.5)),
    1024: ((30.1, 15.1, 0.12), (513, 257, 2), (4011, 2013, 15.6)),
}
MODELS = (7_500_000_000, 128_000_000_000, 1_000_000_000_000)


def _printed_precision(printed: float) -> float:
    """The paper's rounding step for a printed value (1 for integers, else its last digit)."""
    text = repr(printed)
    return 1.0 if "." not in text else 10.0 ** -len(text.split(".")[1])


@pytest.mark.parametrize("dp", ZERO_TABLE_1_GB)
def test_zero_paper_table_1(dp: int) -> None:
    for psi, printed_row in zip(MODELS, ZERO_TABLE_1_GB[dp]):
        for stage, printed in zip((1, 2, 3), printed_row):
            exact = costs.adam_memory_bytes(psi, dp, stage) / GB
            assert abs(exact - printed) <= _printed_precision(printed), (
                f"Psi={psi:.3g}, N_d={dp}, stage {stage}: {exact:.4f} GB vs printed {printed}"
            )


def test_stage_savings_are_the_papers_factors() -> None:
    """ZeRO paper, Section 1: P_os "4x memory reduction", P_os+g "8x", P_os+g+p "linear with DP degree"
    (mixed-precision Adam, K = 12; the first two for a large DP degree)."""
    psi, large = 7_500_000_000, 1_000_000
    replicated = costs.adam_memory_bytes(psi, large, 0)
    assert replicated / costs.adam_memory_bytes(psi, large, 1) == pytest.approx(4, rel=1e-4)
    assert replicated / costs.adam_memory_bytes(psi, large, 2) == pytest.approx(8, rel=1e-4)
    for n in (2, 64, 1024):
        assert costs.adam_memory_bytes(psi, n, 0) / costs.adam_memory_bytes(psi, n, 3) == pytest.approx(n)


def test_memory_parts_add_up_and_shard_in_stage_order() -> None:
    psi, n, k = 1000, 8, 12
    assert costs.zero_memory_parts(psi, n, 0, k) == (2000, 2000, 12000)
    assert costs.zero_memory_parts(psi, n, 1, k) == (2000, 2000, 1500)
    assert costs.zero_memory_parts(psi, n, 2, k) == (2000, 250, 1500)
    assert costs.zero_memory_parts(psi, n, 3, k) == (250, 250, 1500)
    for stage in range(4):
        assert sum(costs.zero_memory_parts(psi, n, stage, k)) == costs.adam_memory_bytes(psi, n, stage, k)
    with pytest.raises(ValueError):
        costs.zero_memory_parts(psi, n, 4, k)
