"""The communication ledger: every collective each rank issued, and what a ring sends.

gloo implements reduce-scatter as an all-reduce plus a local chunk, so neither wall
time nor gloo's own traffic shows what a bandwidth-optimal implementation would send.
The ledger records each collective call (op, dtype, shape, group) on every rank and
prices it as a ring algorithm would send it ((N-1)/N of the message per phase).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist

from helpers.runtime import hooks


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective call issued by one rank.

    ``numel`` is the size of the full message in elements (the whole tensor for an
    all-reduce or broadcast, the concatenated output of an all-gather, the input of a
    reduce-scatter); ``ring_bytes`` is what this rank sends under a ring algorithm.
    """

    index: int
    op: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    group_ranks: tuple[int, ...]
    ring_bytes: float
    detail: str = ""  # reduction (e.g. "SUM") and/or root (e.g. "src=0"); must agree too

    @property
    def group_size(self) -> int:
        return len(self.group_ranks)

    @property
    def signature(self) -> tuple[str, str, tuple[int, ...], str]:
        """What must agree across the ranks of a group for a collective to be valid."""
        return (self.op, self.dtype, self.shape, self.detail)

    def describe(self) -> str:
        """Short human form, e.g. ``all_reduce(float32[4, 3])``."""
        parts = [] if self.dtype == "none" else [f"{self.dtype}{list(self.shape)}"]
        if self.detail:
            parts.append(self.detail)
        return f"{self.op}({', '.join(parts)})"


class Ledger:
    """Per-rank lists of :class:`CollectiveRecord` for one :func:`helpers.runtime.cluster.run`."""

    def __init__(self, records: list[list[CollectiveRecord]]) -> None:
        self.records = records

    @property
    def world_size(self) -> int:
        return len(self.records)

    def count(self, op: str | None = None, rank: int = 0) -> int:
        """How many collectives (of kind ``op``, or all) rank ``rank`` issued."""
        return sum(1 for r in self.records[rank] if op is None or r.op == op)

    def bytes(self, rank: int = 0, op: str | None = None) -> float:
        """Bytes rank ``rank`` sent under ring algorithms (all ops, or only ``op``)."""
        return sum(r.ring_bytes for r in self.records[rank] if op is None or r.op == op)

    def table(self, rank: int = 0) -> str:
        """A printable table of rank ``rank``'s collectives."""
        lines = [f"{'#':>3}  {'collective':<44} {'group':>5} {'ring bytes sent':>16}"]
        for r in self.records[rank]:
            lines.append(f"{r.index + 1:>3}  {r.describe():<44} {r.group_size:>5} {r.ring_bytes:>16,.0f}")
        lines.append(f"total: {self.count(rank=rank)} collectives, {self.bytes(rank):,.0f} bytes")
        return "\n".join(lines)

    def __repr__(self) -> str:
        counts = [self.count(rank=k) for k in range(self.world_size)]
        return f"Ledger(world_size={self.world_size}, collectives per rank={counts})"

    def first_divergence(self) -> str | None:
        """Describe the first call where two ranks of a group disagree, or ``None``.

        Each group's members must issue the same sequence of (op, dtype, shape); with
        gloo a different op silently mixes values and a different shape aborts.
        """
        groups = sorted({r.group_ranks for per_rank in self.records for r in per_rank})
        for group in groups:
            sequences = {
                rank: [r for r in self.records[rank] if r.group_ranks == group]
                for rank in group
                if rank < self.world_size
            }
            message = _compare_sequences(sequences, group, self.world_size)
            if message:
                return message
        return None


def _compare_sequences(
    sequences: dict[int, list[CollectiveRecord]], group: tuple[int, ...], world_size: int
) -> str | None:
    where = "" if len(group) == world_size else f" in group {list(group)}"
    reference_rank = min(sequences)
    reference = sequences[reference_rank]
    longest = max(len(s) for s in sequences.values())
    for call in range(longest):
        for rank, seq in sorted(sequences.items()):
            if rank == reference_rank:
                continue
            ours = seq[call] if call < len(seq) else None
            theirs = reference[call] if call < len(reference) else None
            if ours is not None and theirs is not None and ours.signature == theirs.signature:
                continue
            if ours is None and theirs is None:
                continue
            return (
                f"collective call #{call + 1}{where}: rank {rank} "
                f"{_called(ours)} where rank {reference_rank} {_called(theirs)}"
            )
    return None


def _called(record: CollectiveRecord | None) -> str:
    return "issued no collective" if record is None else f"called {record.describe()}"


# The collectives the ledger records (helpers.runtime.worker wraps each on the ranks) and a "collective"
# fault counts (helpers.runtime.faults). op name -> (argument holding a representative tensor, function giving the full
# message size in elements from the bound arguments and group size, ring phases).
# A ring phase (reduce-scatter, all-gather, pipelined broadcast, all-to-all) sends
# (N-1)/N of the full message from each rank; an all-reduce is two phases.
_Full = Callable[[dict[str, Any], int], int]


def _numel(name: str) -> _Full:
    return lambda a, n: a[name].numel()


def _numel_times_n(name: str) -> _Full:
    return lambda a, n: a[name].numel() * n


def _list_numel(name: str) -> _Full:
    return lambda a, n: sum(t.numel() for t in a[name])


COLLECTIVES: dict[str, tuple[str | None, _Full | None, int]] = {
    "all_reduce": ("tensor", _numel("tensor"), 2),
    "broadcast": ("tensor", _numel("tensor"), 1),
    "reduce": ("tensor", _numel("tensor"), 1),
    "all_gather": ("tensor", _numel_times_n("tensor"), 1),
    "all_gather_into_tensor": ("input_tensor", _numel("output_tensor"), 1),
    "all_gather_single": ("input_tensor", _numel("output_tensor"), 1),
    "reduce_scatter": ("output", _list_numel("input_list"), 1),
    "reduce_scatter_tensor": ("input", _numel("input"), 1),
    "reduce_scatter_single": ("input", _numel("input"), 1),
    "all_to_all_single": ("input", _numel("input"), 1),
    "all_to_all": (None, _list_numel("input_tensor_list"), 1),
    "gather": ("tensor", _numel_times_n("tensor"), 1),
    "scatter": ("tensor", _numel_times_n("tensor"), 1),
    "barrier": (None, None, 0),
    "monitored_barrier": (None, None, 0),
    "all_gather_object": (None, None, 0),
    "broadcast_object_list": (None, None, 0),
    "gather_object": (None, None, 0),
    "scatter_object_list": (None, None, 0),
}


def _detail(bound: dict[str, Any]) -> str:
    """The arguments besides the tensor that all ranks must agree on: reduction and root."""
    parts = []
    if isinstance(bound.get("op"), (dist.ReduceOp, dist.ReduceOp.RedOpType)):
        parts.append(getattr(bound["op"], "name", str(bound["op"])))
    for root in ("src", "dst", "group_src", "group_dst"):
        if bound.get(root) is not None:
            parts.append(f"{root}={bound[root]}")
    return ", ".join(parts)


def record_of(op: str, bound: dict[str, Any], index: int) -> CollectiveRecord:
    """The record of one call of collective ``op`` with its bound arguments, this rank's ``index``-th."""
    tensor_arg, full, phases = COLLECTIVES[op]
    group = bound.get("group")
    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else tuple(range(dist.get_world_size()))
    n = len(ranks)
    tensor = bound.get(tensor_arg) if tensor_arg else None
    if tensor_arg is None and op == "all_to_all":
        tensor = bound["input_tensor_list"][0]
    if isinstance(tensor, torch.Tensor):
        dtype, shape = str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape)
        numel = full(bound, n)
        ring = phases * (n - 1) / n * numel * tensor.element_size()
    else:
        dtype, shape, numel, ring = ("object" if "object" in op else "none"), (), 0, 0.0
    return CollectiveRecord(index, op, dtype, shape, numel, ranks, float(ring), _detail(bound))


# torch 2.13 renamed these two; tutorials still use the old names, so their FutureWarning is
# noise for a student, not a lesson.
RENAMED_WARNING = r".*`torch\.distributed\.(reduce_scatter_tensor|all_gather_into_tensor)` is deprecated.*"

def install_recorder(on_call: Callable[[str, dict[str, Any]], None]) -> None:
    """Call ``on_call(op, bound arguments)`` (see :func:`record_of`) before every collective this
    process runs, under either of its names; a collective that calls another
    (``all_gather_into_tensor`` calls ``all_gather_single``) is recorded once, as the one called.
    The wrapping is :mod:`helpers.runtime.hooks`'s.
    """
    hooks.add_observer(on_call)
