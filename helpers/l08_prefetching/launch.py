"""Lesson 08 under torchrun: your planner picks a prefetch depth, your forward runs at it.

    python -m helpers.launch release/08_prefetching/08_prefetching.ipynb --nproc-per-node 2 -- --budget 3000

Every rank shards the same stack of units (``helpers.l08_prefetching.unit_stack``) into
``PrefetchUnit``s. Your ``plan_prefetch`` gets the units' sizes on this many ranks (no
activations: the forward runs under ``no_grad``), modelled all-gather and compute times and the
memory budget, and returns a depth; your ``prefetching_forward`` then runs at that depth, each
all-gather completing only when waited on (``SlowNetwork``). It is equal when the output is the
unsharded model's, the peak of allocated bytes a storage meter measures is the planned peak and
within the budget, and the seconds your ``blocked_waiting_s`` finds blocked in ``wait()`` on the
modelled clock are the planned exposed communication. It runs on gloo even where CUDA is available:
its subject is the plan and the modelled clock, and ``PrefetchUnit`` keeps its tensors on the CPU.
"""
from __future__ import annotations

import torch

from helpers.launch.worker import Context, Outcome, worker
from helpers.l08_prefetching import forward_on_rank, unit_sizes

NEEDS = ("plan_prefetch", "prefetching_forward", "blocked_waiting_s")
WIDTHS = (8, 12, 4, 12, 6, 6, 3)
GATHER_S = [0.5, 2.0, 0.5, 0.5, 3.0, 0.5]  # modelled seconds per unit: a slow fifth unit
COMPUTE_S = [1.0, 0.0, 1.0, 1.0, 0.5, 1.0]
TOLERANCE = 1e-5


def add_arguments(p) -> None:
    p.add_argument("--budget", type=float, default=3000.0, help="bytes of memory per rank (default 3000)")


def main(student, ctx: Context) -> Outcome:
    unit_bytes, shard_bytes = unit_sizes(WIDTHS, ctx.world_size)
    plan = student.plan_prefetch(GATHER_S, COMPUTE_S, unit_bytes, [0.0] * len(unit_bytes), shard_bytes,
                                 ctx.args.budget)
    if plan is None:
        return Outcome(equal=False, reference="the unsharded model", detail=f"plan_prefetch found no depth within "
                       f"{ctx.args.budget:g} bytes; try a larger --budget")
    x = torch.randn(6, WIDTHS[0], generator=torch.Generator().manual_seed(8))
    result = forward_on_rank(student.prefetching_forward, WIDTHS, x, plan["depth"], slow=True,
                             timings=(GATHER_S, COMPUTE_S))
    diff = float((result["out"] - result["expected"]).abs().max())
    scale = float(result["expected"].abs().max())
    peak = result["peak_bytes"] + result["shard_bytes"]
    blocked = student.blocked_waiting_s(result["trace"])
    wrong = [what for what, bad in [
        (f"output differs by {diff:.2e}", diff > TOLERANCE * scale),
        (f"measured peak {peak:g} bytes is over the budget", peak > ctx.args.budget),
        (f"planned peak {plan['peak_bytes']:g} bytes, measured {peak:g}", abs(plan["peak_bytes"] - peak) > 1e-9 * peak),
        (f"planned exposed {plan['exposed_s']:g} s, blocked {blocked:g} s",
         abs(plan["exposed_s"] - blocked) > 1e-9 * max(1.0, blocked)),
    ] if bad]
    return Outcome(equal=not wrong, reference="the unsharded model, and the plan's own claims",
                   detail="; ".join(wrong) or f"output at depth {plan['depth']} within {TOLERANCE:g} x {scale:.2f}, "
                                             f"peak and exposed time as planned",
                   held_bytes=int(peak),
                   notes=[f"planned: depth {plan['depth']}, peak {plan['peak_bytes']:g} bytes, exposed "
                          f"{plan['exposed_s']:g} s (budget {ctx.args.budget:g} bytes)",
                          f"measured: peak {peak:g} bytes (storage meter, shards included), blocked "
                          f"{blocked:g} s in wait() (modelled clock, your blocked_waiting_s)"])

if __name__ == "__main__":
    worker(main, NEEDS, __doc__.splitlines()[0], add_arguments, backend="gloo")
