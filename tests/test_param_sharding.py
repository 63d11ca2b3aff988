"""Tests of helpers.param_sharding (lesson 07): the schedule against real FSDP2, the unit, the checks."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from helpers import param_sharding as P
from helpers.cluster import run
from helpers.models import TinyLM
from helpers.reference import SameInit, make_batches


def test_schedule_example_and_counts() -> None:
    assert P.full_shard_schedule(1) == [("all_gather", 0), ("free", 0), ("all_gather", 0), ("reduce_scatter", 0),
                                        ("free", 0)]
    for units in range(5):
        for reshard in (True, False):
            events = P.full_shard_schedule(units, reshard)
            assert sum(e[0] == "all_gather" for e in events) == (2 if reshard else 1) * units
            assert sum(e[0] == "reduce_scatter" for e in events) == units
            gathered: set[int] = set()
            for kind, u in events:  # a unit is gathered exactly when it is used, and freed at the end
                if kind == "all_gather":
                    assert u not in gathered
                    gathered.add(u)
                elif kind == "free":
                    gathered.remove(u)
                else:
                    assert u in gathered
            assert not gathered


@pytest.mark.parametrize("reshard", [True, False])
def test_schedule_and_traffic_match_real_fsdp2(reshard: bool) -> None:
    widths = (8, 12, 8, 4)
    counts, ledger = run(lambda: P.fsdp2_counts_on_rank(widths, reshard), world_size=2, ledger=True, timeout=60)
    P.assert_matches_fsdp2(P.full_shard_schedule, counts[0], ledger, reshard)
    P.assert_traffic_measured(P.fsdp_traffic_bytes, ledger, 8 * 12 + 12 + 12 * 8 + 8 + 8 * 4 + 4, reshard)


def test_traffic_closed_forms() -> None:
    assert P.fsdp_traffic_bytes(1000, 2, 4) == pytest.approx(3 * 0.75 * 2000)
    assert P.fsdp_traffic_bytes(1000, 2, 4, reshard_after_forward=False) == pytest.approx(2 * 0.75 * 2000)
    assert P.fsdp_traffic_bytes(1000, 2, 1) == 0


def test_unit_parameters_keeps_ties_at_the_root() -> None:
    lm = TinyLM()
    owners = P.unit_parameters(lm, ["embed", "blocks.0", "head"])
    assert owners["embed"] == owners["head"] == []
    assert owners[""][0] == "embed.weight"
    assert sorted(n for names in owners.values() for n in names) == sorted(n for n, _ in lm.named_parameters())
    shared = nn.Linear(2, 2)
    assert P.unit_parameters(nn.Sequential(nn.Sequential(shared, shared)), ["0"]) == {"0": ["0.0.weight", "0.0.bias"],
                                                                                    "": []}


def test_unit_parameters_check_names_the_split_tie() -> None:
    def both(model, unit_names):
        out = {u: [] for u in [*unit_names, ""]}
        for name, _ in model.named_parameters(remove_duplicate=False):
            out[next((u for u in unit_names if name.startswith(u + ".")), "")].append(name)
        return out

    with pytest.raises(AssertionError, match="appears in two units"):
        P.assert_unit_parameters(both, TinyLM(), ["embed", "head"])


def test_reference_unit_trains_like_full_batch_sgd_and_frees() -> None:
    model_fn = SameInit(P.layered_mlp, seed=1, kwargs={"widths": (5, 9, 7, 2)})
    batches = make_batches(3, 12, 5, 2, seed=2)
    out, ledger = run(lambda: P.shard_train_on_rank(P.ReferenceShardedUnit, P.reference_train, model_fn, batches, 0.1),
                      world_size=3, ledger=True, timeout=60)
    P.assert_sharded_training(out, model_fn, batches, 0.1, ledger, units=3)
    assert out[0]["shard_numel"] == [18, 24, 6]   # ceil(54/3), ceil(70/3), ceil(16/3)


def _train_on_full_params(model, units, batches, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for u in units:
            u.reduce_gradients()
            u.free()
        opt.step()
    return [0.0] * len(batches)


def test_training_check_names_an_optimizer_on_full_parameters() -> None:
    model_fn = SameInit(P.layered_mlp, seed=3, kwargs={"widths": (4, 6, 2)})
    batches = make_batches(2, 4, 4, 2, seed=4)
    out, ledger = run(lambda: P.shard_train_on_rank(P.ReferenceShardedUnit, _train_on_full_params, model_fn, batches,
                                                    0.1), world_size=2, ledger=True, timeout=60)
    with pytest.raises(AssertionError, match="stepping the shards"):
        P.assert_sharded_training(out, model_fn, batches, 0.1, ledger, units=2)
