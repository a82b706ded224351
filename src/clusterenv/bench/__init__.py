"""Measure what the network gives a collective job, against the line rate, and name slow nodes.

``clusterenv bench`` runs on every node at once (like ``preflight``) and starts torchrun with
the worker of this package; :func:`run` does the same measurement inside a process group that is
already initialised. What is measured follows nccl-tests' definitions (:mod:`.units`), the line
rate comes from sysfs (:mod:`.linerate`), and the verdict is :mod:`.verdict`'s.

Importing this package imports neither torch nor pydantic; :func:`run` imports torch.

Example::

    import torch.distributed as dist
    from clusterenv import bench

    dist.init_process_group("nccl")
    result = bench.run(sizes=bench.parse_sizes("1M,64M,1G"))
    if dist.get_rank() == 0:
        print(result.to_dict()["slow_nodes"])
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterenv.bench.conclude import (
    CODES,
    conclude,
)
from clusterenv.bench.linerate import (
    LineRate,
    Rail,
    interface_line_rate,
    rails_in_use,
    rdma_line_rate,
)
from clusterenv.bench.model import BenchResult, LinkResult, NodeInfo, SizeResult
from clusterenv.bench.svg import nothing_to_draw, render_svg, write_svg
from clusterenv.bench.units import (
    CPU_SIZES,
    GPU_SIZES,
    algbw_gbs,
    busbw_factor,
    busbw_gbs,
    format_size,
    line_fraction,
    parse_size,
    parse_sizes,
)
from clusterenv.bench.verdict import (
    NodeScore,
    Transfer,
    ring_transfers,
    schedule_rounds,
    score_nodes,
)

if TYPE_CHECKING:
    from clusterenv.bench.worker import run

__all__ = [
    "CODES",
    "CPU_SIZES",
    "GPU_SIZES",
    "BenchResult",
    "LineRate",
    "LinkResult",
    "NodeInfo",
    "NodeScore",
    "Rail",
    "SizeResult",
    "Transfer",
    "algbw_gbs",
    "busbw_factor",
    "busbw_gbs",
    "conclude",
    "format_size",
    "interface_line_rate",
    "line_fraction",
    "nothing_to_draw",
    "parse_size",
    "parse_sizes",
    "rails_in_use",
    "rdma_line_rate",
    "render_svg",
    "ring_transfers",
    "run",
    "schedule_rounds",
    "score_nodes",
    "write_svg",
]



def __getattr__(name: str) -> Any:
    # run() lives with the worker; importing it here would make every import of this package
    # pay for the worker module. torch itself is imported only when run() is called.
    if name == "run":
        from clusterenv.bench.worker import run  # noqa: PLC0415

        return run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
