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


def zero_memory_parts(num_params: int, world_size: int, stage: int, k: int = 12) -> tuple[float, float, float]:
    """Persistent model-state bytes per rank for mixed-precision Adam under ZeRO, by part.

    Returns ``(parameters, gradients, optimizer_state)``, following Rajbhandari et al.,
    "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC 2020),
    Section 3 and Figure 1: 2 bytes of fp16 parameters, 2 bytes of fp16 gradients and ``k``
    bytes of optimizer state (fp32 master weights, momentum and variance: k = 12) per
    parameter ``num_params`` (Psi), on ``world_size`` (N_d) data-parallel ranks. Stage 1
    shards the optimizer state over the ranks, stage 2 the gradients too, stage 3 the
    parameters too; stage 0 is replicated.
    """
    _check_world(world_size)
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"stage must be 0, 1, 2 or 3, got {stage}")
    if num_params < 0 or k < 0:
        raise ValueError("num_params and k must be >= 0")
    params, grads, states = 2 * num_params, 2 * num_params, k * num_params
    if stage >= 1:
        states /= world_size
    if stage >= 2:
        grads /= world_size
    if stage >= 3:
        params /= world_size
    return params, grads, states


def adam_memory_bytes(num_params: int, world_size: int, stage: int, k: int = 12) -> float:
    """Persistent model-state bytes per rank for mixed-precision Adam under ZeRO (all parts).

    stage 0 (replicated): (2 + 2 + k) * Psi
    stage 1 (P_os):       2 * Psi + 2 * Psi + k * Psi / N
    stage 2 (P_os+g):     2 * Psi + (2 + k) * Psi / N
    stage 3 (P_os+g+p):   (2 + 2 + k) * Psi / N

    See :func:`zero_memory_parts` for the units and the source.
    """
    params, grads, states = zero_memory_parts(num_params, world_size, stage, k)
    return params + grads + states
