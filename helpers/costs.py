"""Communication and memory calculators: the reference answers of the course.

All volumes are in bytes sent by one rank under a bandwidth-optimal ring algorithm
(Patarasuk & Yuan 2009; Thakur et al. 2005), with the whole message of
``num_elements * bytes_per_element`` bytes, i.e. the size of the full tensor before
reduce-scatter or after all-gather.
"""
from __future__ import annotations


def _message_bytes(num_elements: int, bytes_per_element: int) -> int:
    if num_elements < 0 or bytes_per_element <= 0:
        raise ValueError("num_elements must be >= 0 and bytes_per_element > 0")
    return num_elements * bytes_per_element


def _check_world(world_size: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")


def ring_allreduce_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-reduce: 2(N-1)/N * message bytes."""
    _check_world(world_size)
    return 2 * (world_size - 1) / world_size * _message_bytes(num_elements, bytes_per_element)


def ring_reduce_scatter_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring reduce-scatter of the full tensor: (N-1)/N * bytes."""
    _check_world(world_size)
    return (world_size - 1) / world_size * _message_bytes(num_elements, bytes_per_element)


def ring_allgather_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in a ring all-gather producing the full tensor: (N-1)/N * bytes."""
    _check_world(world_size)
    return (world_size - 1) / world_size * _message_bytes(num_elements, bytes_per_element)


def ring_broadcast_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Average bytes per rank of a pipelined ring broadcast: (N-1)/N * bytes.

    In a chain every rank but the last forwards the whole message once, so the
    group sends (N-1) * bytes in total.
    """
    _check_world(world_size)
    return (world_size - 1) / world_size * _message_bytes(num_elements, bytes_per_element)


def ring_all_to_all_bytes(num_elements: int, bytes_per_element: int, world_size: int) -> float:
    """Bytes each rank sends in an all-to-all of its input: all but its own 1/N chunk."""
    _check_world(world_size)
    return (world_size - 1) / world_size * _message_bytes(num_elements, bytes_per_element)
