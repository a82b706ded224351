"""Helpers the node-level platform sources share: line lists of IPs, and processes per node."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root
from clusterenv._shell import Placeholder, export
from clusterenv.sources._base import EnvReader

__all__ = ["gpus_or_visible", "ip_lines", "nproc_per_node", "torchrun_rendezvous_options"]


def torchrun_rendezvous_options(
    environ: Mapping[str, str], names: tuple[str, ...]
) -> tuple[str, ...]:
    """Which of torchrun's options given as variables (``PET_<OPTION>``, read by
    ``torch/distributed/argparse_util.py``) in ``names`` are set and say that nodes rendezvous
    with each other: any of them except ``PET_NNODES``, which counts only when it is not one
    node (``1``, ``1:1``: what ``clusterenv env --torchrun`` exports on one machine, with
    ``PET_STANDALONE``). ``PET_NPROC_PER_NODE`` never does: it describes one machine."""
    found = []
    for name in names:
        value = (environ.get(name) or "").strip()
        if not value or (name == "PET_NNODES" and value.replace(" ", "") in ("1", "1:1")):
            continue
        found.append(name)
    return tuple(found)


def ip_lines(env: EnvReader, name: str) -> list[str] | None:
    """A newline-separated list of IP addresses (``SKYPILOT_NODE_IPS``), canonical; None and a
    problem when an entry is not an IP address."""
    value = env.get(name)
    if value is None:
        return None
    out: list[str] = []
    for line in value.splitlines():
        text = line.strip()
        if not text:
            continue
        try:
            out.append(str(ipaddress.ip_address(text)))
        except ValueError:
            env.problem(
                (name,),
                f"{name}={value!r}: {text!r} is not an IP address (one address per line)",
                "let the platform set it; do not export it by hand",
                "config-bad-address",
            )
            return None
    return out


def gpus_or_visible(env: EnvReader, name: str, root: Root, *, what: str) -> int | None:
    """Processes per node from a GPU count variable; a count of 0 (a CPU node) or an unset
    variable falls back to the visible GPUs, else 1."""
    value = env.integer(name, required=False, what=what, example="<GPUs per node>")
    if value:
        return value
    if value is None and env.any_set(name):
        return None  # garbled: the problem is recorded
    return visible_gpu_count(env.environ, root) or 1


def nproc_per_node(env: EnvReader, name: str, root: Root) -> int | None:
    """torchrun's ``--nproc-per-node`` value as torchrun resolves it on this node: an integer,
    ``gpu`` (the visible GPUs), ``cpu`` (the CPU count) or ``auto`` (GPUs if any, else CPUs)."""
    value = env.get(name)
    if value is None:
        return visible_gpu_count(env.environ, root) or 1
    word = value.strip().lower()
    gpus = visible_gpu_count(env.environ, root)
    if word == "auto":
        return gpus or os.cpu_count() or 1
    if word == "cpu":
        return os.cpu_count() or 1
    if word == "gpu":
        if not gpus:
            env.problem(
                (name,),
                f"{name}={value!r} but no GPU is visible on this node: torchrun would fail",
                export(name, Placeholder("<processes per node>")),
                "config-out-of-range",
            )
            return None
        return gpus
    return env.parse_int(
        name, value, what="processes per node", example="<processes per node>", minimum=1
    )
