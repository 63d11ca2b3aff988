"""helpers.runtime.hooks: the one wrapping of torch.distributed's collectives (on 2 gloo ranks)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from helpers.runtime import hooks
from helpers.runtime.cluster import run
from helpers.runtime.slow_network import SlowNetwork


def _observed_on_rank() -> list[str]:
    seen: list[str] = []

    def observer(op: str, bound: dict) -> None:
        seen.append(op)

    hooks.add_observer(observer)
    try:
        t = torch.ones(4)
        dist.all_reduce(t)
        c10d.all_reduce(t)  # the other name of the same function
        dist.all_gather_into_tensor(torch.empty(8), t)  # calls all_gather_single: one call, not two
    finally:
        hooks.remove_observer(observer)
    dist.all_reduce(t)  # removed: not seen
    return seen


def test_an_observer_sees_each_collective_once_under_either_name() -> None:
    for seen in run(_observed_on_rank, world_size=2, timeout=30):
        assert seen == ["all_reduce", "all_reduce", "all_gather_into_tensor"]


def _slow_c10d_on_rank() -> dict:
    a = torch.full((2,), float(dist.get_rank() + 1))
    with SlowNetwork():
        handle = c10d.all_reduce(a, async_op=True)
        before = a.tolist()
        handle.wait()
        after = a.tolist()
        held = hooks.intercepted()
        with pytest.raises(RuntimeError, match="already intercepted"):
            with SlowNetwork():
                pass
    return {"before": before, "after": after, "held": held, "released": hooks.intercepted()}


def test_slow_network_defers_the_c10d_name_too_and_does_not_nest() -> None:
    for rank, out in enumerate(run(_slow_c10d_on_rank, world_size=2, timeout=30)):
        assert out["before"] == [rank + 1.0] * 2
        assert out["after"] == [3.0, 3.0]
        assert set(out["held"]) == {"all_reduce", "all_gather_single", "reduce_scatter_single"}
        assert out["released"] == ()
