"""Fast unit tests for helpers.denominator (single process, except one tiny gloo call)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import io
import math

import pytest
import torch

from helpers import denominator as D
from helpers.data import token_batch, uneven_window
from helpers.ledger import CollectiveRecord, Ledger
from helpers.reference import to_float64


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny-model math is fastest on one thread, and 2 threads crawl on a busy 2-core machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _record(dtype: str = "int64", shape: tuple[int, ...] = (1,), op: str = "all_reduce") -> CollectiveRecord:
    return CollectiveRecord(index=0, op=op, dtype=dtype, shape=shape, numel=math.prod(shape),
                            group_ranks=(0, 1), ring_bytes=8.0, detail="SUM")


def test_masked_loss_sum_ignores_padding_values():
    losses = torch.tensor([[1.0, 2.0, 1e4], [3.0, 1e4, 1e4]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert D.masked_loss_sum(losses, mask).item() == 6.0


def test_global_mean_gradients_equal_one_batch_of_all_valid_tokens():
    window = uneven_window(world_size=2, micro_batches=2, seed=4)
    model = D.tiny_lm(3)
    ref = to_float64(model)
    total = sum(D.masked_loss_sum(D.token_cross_entropy(ref(mb.tokens), mb.targets), mb.mask)
                for per_rank in window for mb in per_rank)
    (total / D.window_count(window)).backward()
    got = D.global_mean_gradients(model, window)
    for name, p in ref.named_parameters():
        torch.testing.assert_close(got[name], p.grad)


def test_empty_window_has_zero_gradient_and_equal_counts_have_no_bias():
    empty = uneven_window(world_size=2, micro_batches=1, empty_ranks=(0, 1), seed=1)
    assert all(torch.count_nonzero(g) == 0 for g in D.global_mean_gradients(D.tiny_lm(0), empty).values())
    equal = [[token_batch([5, 3], max_len=8, seed=r)] for r in range(2)]
    model = D.tiny_lm(1)
    for name, g in D.global_mean_gradients(model, equal).items():
        torch.testing.assert_close(g, D.mean_of_means_gradients(model, equal)[name])


def test_sgd_reference_skips_empty_windows():
    model = D.tiny_lm(2)
    empty = uneven_window(world_size=2, micro_batches=1, empty_ranks=(0, 1), seed=5)
    full = uneven_window(world_size=2, micro_batches=1, seed=6)
    once = D.sgd_reference(model, [full], lr=0.1, momentum=0.9)
    with_empty = D.sgd_reference(model, [full, empty], lr=0.1, momentum=0.9)
    assert all(torch.equal(once[n], with_empty[n]) for n in once)


def test_mean_of_means_factors_and_token_weights():
    assert D.mean_of_means_factors([30, 10]) == pytest.approx([2 / 3, 2.0])
    assert D.mean_of_means_factors([7, 7]) == [1.0, 1.0]
    with pytest.raises(ValueError):
        D.mean_of_means_factors([3, 0])
    assert D.token_weights([3, 1, 0], "global") == pytest.approx([0.25, 0.25, 0.0])
    assert D.token_weights([3, 1, 0], "mean of means") == pytest.approx([1 / 9, 1 / 3, 0.0])
    assert D.token_weights([0, 0], "global") == [0.0, 0.0]


def test_count_masks_have_exact_counts_and_shapes():
    masks = D.count_masks([(2, 8, 11), (3, 3, 0), (4097, 4096, 16_777_217)], seed=3)
    assert [m.shape for m in masks] == [(2, 8), (3, 3), (4097, 4096)]
    assert [int(m.sum()) for m in masks] == [11, 0, 16_777_217]
    with pytest.raises(ValueError):
        D.count_masks([(2, 2, 5)])


def test_count_checks_name_the_mistake():
    D.assert_count_result([23, 23], 23, "ok")
    with pytest.raises(AssertionError, match="Python int"):
        D.assert_count_result([torch.tensor(23), 23], 23, "tensor")
    with pytest.raises(AssertionError, match="exact integer dtype"):
        D.assert_count_result([50_331_648], 50_331_651, "float32")
    D.assert_count_ledger(Ledger([[_record()], [_record()]]), [0, 1], "ok")
    with pytest.raises(AssertionError, match="float16"):
        D.assert_count_ledger(Ledger([[_record("float16")], [_record("float16")]]), [0, 1], "fp16")
    with pytest.raises(AssertionError, match="different shapes"):
        D.assert_count_ledger(Ledger([[_record(shape=(2,))], [_record(shape=(3,))]]), [0, 1], "shapes")
    with pytest.raises(AssertionError, match="exactly one"):
        D.assert_count_ledger(Ledger([[_record(), _record()], [_record(), _record()]]), [0, 1], "two")


def test_loss_and_factor_checks():
    D.assert_loss_value(torch.tensor(2.5), 2.5, "ok")
    with pytest.raises(AssertionError, match="finite"):
        D.assert_loss_value(torch.tensor(float("nan")), 0.0, "nan")
    with pytest.raises(AssertionError, match="world_size=4"):
        D.assert_loss_value(torch.tensor(1.0), 4.0, "no N", world_size=4)
    D.assert_factors(D.mean_of_means_factors, [[3, 5, 9]])
    with pytest.raises(AssertionError, match="reciprocal"):
        D.assert_factors(lambda c: [len(c) * n / sum(c) for n in c], [[3, 5]])


def test_figures_and_explorer_render():
    for fig in (D.plot_denominator_bias([1, 2, 4], {"a": [1e-7, 0.2, 0.5], "b": [1e-7] * 3}),
                D.plot_token_weights([60, 20, 5, 0])):
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=40)
        assert buf.getvalue().startswith(b"\x89PNG")
    explorer = D.token_count_explorer(counts=(30, 10, 0))
    explorer.controls[2].value = 20
    result = explorer.update()
    assert result["global_count"] == 60
    assert result["factors"] == pytest.approx([60 / 90, 2.0, 1.0])


def test_count_on_rank_drives_a_gloo_group():
    from helpers.cluster import run

    def count(masks, group):
        local = torch.tensor([sum(int(m.sum()) for m in masks)], dtype=torch.int64)
        torch.distributed.all_reduce(local, group=group)
        return int(local)

    out, ledger = run(lambda: D.count_on_rank(count, [[(2, 4, 3)], []]), world_size=2, ledger=True, timeout=20)
    D.assert_count_result(out, 3, "2 ranks")
    D.assert_count_ledger(ledger, [0, 1], "2 ranks")
