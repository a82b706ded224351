"""Counting the GPUs this process can see, without NVML or CUDA.

The driver lists each GPU it manages as ``/proc/driver/nvidia/gpus/<pci-bus-id>/``; inside a
container only the GPUs given to it are mounted there. ``CUDA_VISIBLE_DEVICES`` narrows further.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from clusterenv._root import Root

__all__ = ["parse_cuda_visible_devices", "visible_gpu_count"]

_INDEX = re.compile(r"[0-9]+")
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]+(/[0-9]+/[0-9]+)?")


def parse_cuda_visible_devices(value: str, installed: int) -> int:
    """How many of ``installed`` GPUs a ``CUDA_VISIBLE_DEVICES`` value leaves visible.

    Follows the CUDA runtime: entries are read left to right and parsing stops at the first
    invalid one (an index out of range, ``-1``, ``NoDevFiles``); repeats stop it too.
    An empty value hides every GPU.
    """
    seen: set[str] = set()
    for raw in value.split(","):
        token = raw.strip()
        if _INDEX.fullmatch(token):
            if int(token) >= installed:
                break
            token = str(int(token))
        elif not _UUID.fullmatch(token):
            break
        if token in seen:
            break
        seen.add(token)
    return min(len(seen), installed)


def visible_gpu_count(environ: Mapping[str, str], root: Root) -> int:
    """GPUs under ``/proc/driver/nvidia/gpus``, narrowed by ``CUDA_VISIBLE_DEVICES``."""
    installed = len(root.listdir("proc/driver/nvidia/gpus"))
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or installed == 0:
        return installed
    return parse_cuda_visible_devices(visible, installed)
