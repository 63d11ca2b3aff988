"""Unit tests for lesson 02: its package and its instructor side (single process, except one tiny gloo call)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import math

import pytest
import torch
import torch.nn.functional as F

from autograder.lessons import l02 as ref
from helpers import l02_global_denominator as D
from helpers.shared.data import token_batch, uneven_window
from helpers.runtime.ledger import CollectiveRecord, Ledger
from helpers.shared.state import to_float64
from figure_checks import labelled, renders


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
    assert ref.masked_loss_sum(losses, mask).item() == 6.0


def test_global_mean_gradients_equal_pytorch_cross_entropy_over_all_valid_tokens():
    window = uneven_window(world_size=2, micro_batches=2, seed=4)
    model = D.tiny_lm(3)
    one = to_float64(model)
    logits = torch.cat([one(mb.tokens)[mb.mask] for per_rank in window for mb in per_rank])
    targets = torch.cat([mb.targets[mb.mask] for per_rank in window for mb in per_rank])
    F.cross_entropy(logits, targets).backward()
    assert ref.window_count(window) == len(targets)
    got = ref.global_mean_gradients(model, window)
    for name, p in one.named_parameters():
        torch.testing.assert_close(got[name], p.grad)


def test_empty_window_has_zero_gradient_and_equal_counts_have_no_bias():
    empty = uneven_window(world_size=2, micro_batches=1, empty_ranks=(0, 1), seed=1)
    assert all(torch.count_nonzero(g) == 0 for g in ref.global_mean_gradients(D.tiny_lm(0), empty).values())
    equal = [[token_batch([5, 3], max_len=8, seed=r)] for r in range(2)]
    model = D.tiny_lm(1)
    for name, g in ref.global_mean_gradients(model, equal).items():
        torch.testing.assert_close(g, ref.mean_of_means_gradients(model, equal)[name])


def test_sgd_reference_skips_empty_windows():
    model = D.tiny_lm(2)
    empty = uneven_window(world_size=2, micro_batches=1, empty_ranks=(0, 1), seed=5)
    full = uneven_window(world_size=2, micro_batches=1, seed=6)
    once = ref.sgd_reference(model, [full], lr=0.1, momentum=0.9)
    with_empty = ref.sgd_reference(model, [full, empty], lr=0.1, momentum=0.9)
    assert all(torch.equal(once[n], with_empty[n]) for n in once)


def test_sgd_reference_weight_decay_moves_parameters_and_skips_empty_windows():
    model = D.tiny_lm(2)
    empty = uneven_window(world_size=2, micro_batches=1, empty_ranks=(0, 1), seed=5)
    full = uneven_window(world_size=2, micro_batches=1, seed=6)
    plain_sgd = ref.sgd_reference(model, [full], lr=0.1, momentum=0.9)
    decayed = ref.sgd_reference(model, [full], lr=0.1, momentum=0.9, weight_decay=0.01)
    assert not all(torch.equal(plain_sgd[n], decayed[n]) for n in plain_sgd)
    with_empty = ref.sgd_reference(model, [full, empty], lr=0.1, momentum=0.9, weight_decay=0.01)
    assert all(torch.equal(decayed[n], with_empty[n]) for n in decayed)


def test_padded_window_holds_all_padding_micro_batches_of_another_shape():
    window = ref.padded_window(3, 2, seed=4, rows=2, empty_ranks=(2,), padding_only=[(0, 1), (1, 0)])
    assert [[mb.num_valid == 0 for mb in per_rank] for per_rank in window][:2] == [[False, True], [True, False]]
    assert window[0][1].mask.shape == (3, 5) and window[0][0].mask.shape == (2, 8)
    assert all(mb.num_valid == 0 for mb in window[2])
    assert ref.window_count(window) == window[0][0].num_valid + window[1][1].num_valid


def test_window_ledger_check_counts_collectives_per_window_and_their_group():
    D.assert_window_ledger(Ledger([[_record()] * 2, [_record()] * 2]), 2, "ok")
    D.assert_window_ledger(Ledger([[], []]), 2, "none")
    with pytest.raises(AssertionError, match="one per window"):
        D.assert_window_ledger(Ledger([[_record()] * 3, [_record()] * 3]), 2, "three")
    narrow = CollectiveRecord(index=0, op="all_reduce", dtype="int64", shape=(1,), numel=1,
                              group_ranks=(0,), ring_bytes=0.0, detail="SUM")
    with pytest.raises(AssertionError, match="other than"):
        D.assert_window_ledger(Ledger([[narrow], [_record()]]), 2, "group")


def test_mean_of_means_factors():
    assert ref.mean_of_means_factors([30, 10]) == pytest.approx([2 / 3, 2.0])
    assert ref.mean_of_means_factors([7, 7]) == [1.0, 1.0]
    with pytest.raises(ValueError):
        ref.mean_of_means_factors([3, 0])


def test_stored_factors_cover_the_explorer_and_the_chapter_but_no_test_case():
    table = ref.token_factors()
    assert len(table) == len(D.EXPLORER_COUNTS) ** D.EXPLORER_RANKS + len(ref.CHAPTER_COUNTS)
    assert table["5,1,0,0"] == [pytest.approx(6 / 20), pytest.approx(6 / 4), None, None]
    assert D.stored_factors([60, 20, 5, 0]) == table["60,20,5,0"]
    assert D.stored_factors([8 * 16, 8, 8]) == pytest.approx([144 / 384, 6.0, 6.0])
    for counts in ([30, 10], [7, 7, 7], [512, 3, 77, 1], [1], [1000, 999, 1], [5, 15, 25]):
        with pytest.raises(KeyError):
            D.stored_factors(counts)


def test_stored_references_are_the_references_of_the_visible_cases():
    window = uneven_window(**ref.VISIBLE_LOSS_WINDOW)
    expected = ref.global_mean_gradients(D.tiny_lm(ref.VISIBLE_LOSS_SEED), window)
    stored = D.stored_reference("loss_gradients")
    assert stored.keys() == expected.keys()
    for name, g in expected.items():
        torch.testing.assert_close(stored[name], g, rtol=1e-8, atol=1e-12)
    assert set(D.stored_reference("train_state")) >= set(expected)
    with pytest.raises(KeyError):
        D.stored_reference("nothing")


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
    D.assert_factors(lambda c: [2 / 3, 2.0], [([30, 10], [2 / 3, 2.0])])
    with pytest.raises(AssertionError, match="reciprocal"):
        D.assert_factors(lambda c: [1.5, 0.5], [([30, 10], [2 / 3, 2.0])])


class _AlwaysEqual(float):
    def __eq__(self, other):
        return True


def test_hidden_checks_accept_only_plain_values():
    ref.check_factors(lambda c: [sum(c) / (len(c) * n) for n in c], [[3, 5, 9]])
    with pytest.raises(AssertionError, match="reciprocal"):
        ref.check_factors(lambda c: [len(c) * n / sum(c) for n in c], [[3, 5]])
    with pytest.raises(AssertionError, match="plain data"):
        ref.check_factors(lambda c: [_AlwaysEqual(1.0)] * len(c), [[3, 5]])
    ref.check_count([23, 23], 23, "ok")
    with pytest.raises(AssertionError, match="plain data"):
        ref.check_count([_AlwaysEqual(23.0)], 23, "subclass")
    ref.check_loss_value(torch.tensor(2.5, requires_grad=True) * 1, 2.5, "ok")


def test_figures_and_explorer_render():
    for fig in (D.plot_denominator_bias([1, 2, 4], {"a": [1e-7, 0.2, 0.5], "b": [1e-7] * 3}),
                D.plot_token_weights([60, 20, 5, 0], D.stored_factors([60, 20, 5, 0]))):
        labelled(fig.axes[0])
        renders(fig)
    explorer = D.token_count_explorer(counts=(60, 20, 5, 0))
    explorer.controls[3].value = 20
    result = explorer.update()
    assert result["global_count"] == 105
    assert result["factors"] == pytest.approx([105 / 240, 105 / 80, 105 / 20, 105 / 80])
    with pytest.raises(ValueError):
        D.token_count_explorer(counts=(30, 10, 0))


def test_count_on_rank_drives_a_gloo_group():
    from helpers.runtime.cluster import run

    def count(masks, group):
        local = torch.tensor([sum(int(m.sum()) for m in masks)], dtype=torch.int64)
        torch.distributed.all_reduce(local, group=group)
        return int(local)

    out, ledger = run(lambda: D.count_on_rank(count, [[(2, 4, 3)], []]), world_size=2, ledger=True, timeout=20)
    D.assert_count_result(out, 3, "2 ranks")
    D.assert_count_ledger(ledger, [0, 1], "2 ranks")


def _masked_loss(token_losses, mask, global_count, world_size=1):
    return ref.masked_loss_sum(token_losses, mask) * (world_size / max(global_count, 1))


def test_loss_and_gradient_reports_plain_loss_history_and_token_gradient():
    losses = torch.tensor([[1.0, 2.0, 40.0], [3.0, 50.0, 60.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    out = D.loss_and_gradient(_masked_loss, losses, mask, 4, 2)
    assert out["loss"].item() == pytest.approx(3.0) and not out["loss"].requires_grad
    assert out["requires_grad"] is True
    torch.testing.assert_close(out["grad"], torch.where(mask, 0.5, 0.0))
    assert losses.grad is None and not losses.requires_grad  # the caller's tensor is not touched
    detached = D.loss_and_gradient(lambda *a: torch.zeros(()), losses, mask, 0)
    assert detached["requires_grad"] is False and detached["grad"] is None
    unreached = D.loss_and_gradient(lambda *a: torch.zeros((), requires_grad=True), losses, mask, 0)
    assert unreached["requires_grad"] is True and unreached["grad"] is None


def test_padded_driver_backpropagates_to_the_unpadded_losses_and_ships_by_value():
    import pickle

    import cloudpickle

    losses = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    valid = torch.tensor([[True, False, True], [False, True, False]])
    out = ref.padded_loss_and_gradient(lambda tl, *a: tl.sum(), losses, valid, 1e4, valid, 5, 3)
    assert out["loss"].item() == pytest.approx(1 + 3 + 5 + 3e4)
    torch.testing.assert_close(out["grad"], valid.float())  # padded positions do not reach the leaf
    out = ref.padded_loss_and_gradient(_masked_loss, losses, valid, 1e4, torch.zeros_like(valid), 0, 4)
    assert out["loss"].item() == 0.0 and out["requires_grad"] and torch.equal(out["grad"], torch.zeros_like(losses))
    # The kernel never imports autograder: the driver travels by value, the references stay behind.
    blob = cloudpickle.dumps(ref.padded_loss_and_gradient)
    assert b"_make_function" in blob  # by value, not imported from autograder.lessons
    assert not any(name.encode() in blob for name in ("global_mean_gradients", "window_count", "check_loss_value"))
    assert pickle.loads(blob)(_masked_loss, losses, valid, 1e4, valid, 3, 1)["loss"].item() == pytest.approx(3.0)
