"""Message sizes and the bandwidth arithmetic of nccl-tests, so the numbers compare.

The definitions are those of nccl-tests' ``doc/PERFORMANCE.md``
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md):

- *algorithm bandwidth* ``algbw = S / t``: the message size ``S`` in bytes over the time ``t``
  the operation took, in GB/s (10^9 bytes per second);
- *bus bandwidth* ``busbw = algbw × factor``, the speed each rank's slowest link had to run at,
  which is comparable with the hardware's peak whatever the rank count. For all-reduce the
  factor is ``2(n−1)/n`` (``n`` ranks: a ring reduce-scatter then all-gather each move
  ``(n−1)/n × S`` through every link); ``(n−1)/n`` for all-gather and reduce-scatter; ``1``
  for broadcast, reduce and point-to-point.

Sizes follow nccl-tests' ``-b``/``-e`` spelling: ``K``, ``M`` and ``G`` are powers of 1024.
Line rates are in Gb/s (10^9 bits per second), as ``ethtool`` and RDMA ports report them.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

__all__ = [
    "CPU_SIZES",
    "ELEMENT_BYTES",
    "GPU_SIZES",
    "Collective",
    "algbw_gbs",
    "busbw_factor",
    "busbw_gbs",
    "format_size",
    "line_fraction",
    "median",
    "parse_size",
    "parse_sizes",
]

#: Bytes per element: the benchmark moves ``float32`` tensors.
ELEMENT_BYTES = 4
_MIB = 1 << 20
#: The default sweep on a GPU host: 256 KiB to 1 GiB, ×4 per step.
GPU_SIZES: tuple[int, ...] = tuple(256 * 1024 * 4**i for i in range(7))
#: The default sweep on a CPU host (Gloo): 256 KiB to 64 MiB, ×4 per step.
CPU_SIZES: tuple[int, ...] = tuple(256 * 1024 * 4**i for i in range(5))

#: A collective whose bus-bandwidth factor nccl-tests defines.
Collective = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                     "send_recv"]

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>[KMGT]?)(?:I?B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """One message size in bytes: ``"4096"``, ``"256K"``, ``"16M"``, ``"1G"`` (also ``"1MiB"``).

    ``K``/``M``/``G`` are powers of 1024, as in nccl-tests. The size must be a whole number of
    ``float32`` elements (a multiple of 4 bytes), at least 4 bytes.

    Raises:
        ValueError: For anything else, naming the value and the expected form, e.g.
            ``"'16X': expected a size such as 4096, 256K, 16M or 1G"``.
    """
    stripped = text.strip()
    match = _SIZE.fullmatch(stripped)
    if match is None:
        raise ValueError(f"{text!r}: expected a size such as 4096, 256K, 16M or 1G")
    value = float(match["number"]) * _UNITS[match["unit"].upper()]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    size = int(value)
    if size < ELEMENT_BYTES:
        raise ValueError(f"{text!r}: a message is at least {ELEMENT_BYTES} bytes (one float32)")
    if size % ELEMENT_BYTES:
        raise ValueError(
            f"{text!r} = {size} bytes is not a multiple of {ELEMENT_BYTES} (float32 elements); "
            f"use {size - size % ELEMENT_BYTES} or {size - size % ELEMENT_BYTES + ELEMENT_BYTES}"
        )
    return size


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of sizes, e.g. ``"1M,16M,256M"`` → ``(1048576, 16777216,
    268435456)``; sorted, duplicates dropped.

    Raises:
        ValueError: Naming every bad entry at once, e.g. ``"'16X': expected a size ...; '3':
            ..."``.
    """
    problems: list[str] = []
    sizes: set[int] = set()
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError(f"{text!r}: expected at least one size, e.g. 1M,16M,256M")
    for item in items:
        try:
            sizes.add(parse_size(item))
        except ValueError as e:
            problems.append(str(e))
    if problems:
        raise ValueError("; ".join(problems))
    return tuple(sorted(sizes))


def format_size(size: int) -> str:
    """The shortest exact spelling of ``size`` bytes: ``1048576`` → ``"1M"``, ``1000`` →
    ``"1000"``, ``1536`` → ``"1536"``."""
    for unit in ("T", "G", "M", "K"):
        factor = _UNITS[unit]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def algbw_gbs(size: int, seconds: float) -> float:
    """Algorithm bandwidth in GB/s: ``size`` bytes over ``seconds``, e.g. ``(1e9, 0.5)`` → 2.0.

    Raises:
        ValueError: When ``seconds`` is not positive.
    """
    if seconds <= 0:
        raise ValueError(f"seconds={seconds}: a measured time is positive")
    return size / seconds / 1e9


def busbw_factor(ranks: int, collective: Collective = "all_reduce") -> float:
    """nccl-tests' bus-bandwidth factor for ``ranks`` ranks, e.g. ``(8, "all_reduce")`` → 1.75.

    Raises:
        ValueError: When ``ranks`` is below 1 or the collective is unknown.
    """
    if ranks < 1:
        raise ValueError(f"ranks={ranks}: expected at least 1")
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    if collective in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise ValueError(f"collective={collective!r}: no bus-bandwidth factor is defined")


def busbw_gbs(algbw: float, ranks: int, collective: Collective = "all_reduce") -> float:
    """Bus bandwidth in GB/s from the algorithm bandwidth: ``algbw × busbw_factor(ranks)``."""
    return algbw * busbw_factor(ranks, collective)


def line_fraction(gbs: float | None, line_rate_gbps: float | None) -> float | None:
    """A bandwidth in GB/s as a fraction of a line rate in Gb/s: ``(12.5, 100)`` → 1.0.

    None when either is unknown or the line rate is not positive.
    """
    if gbs is None or line_rate_gbps is None or line_rate_gbps <= 0:
        return None
    return gbs * 8 / line_rate_gbps


def median(values: Iterable[float]) -> float:
    """The median (the mean of the two middle values for an even count).

    Raises:
        ValueError: For no values.
    """
    data: Sequence[float] = list(values)
    if not data:
        raise ValueError("median of no values")
    return float(statistics.median(data))
