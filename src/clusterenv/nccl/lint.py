"""Checks on NCCL and PyTorch variables alone: deprecated names, leftover debug knobs, switches
that hide failures (failure modes FM-23, FM-24, FM-26, FM-33 of the catalogue).

Each check returns ``(variable, Finding)`` pairs: the plan keeps every such variable (clusterenv
never changes them) and warns about it; ``doctor`` shows the findings.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from clusterenv._facts import ENVIRONMENT, Facts
from clusterenv.findings import Finding

__all__ = ["DEBUG_KNOBS", "DEPRECATED", "env_checks"]

#: Variables PyTorch 2.2 renamed (pytorch#114880); the old names only print a warning.
DEPRECATED: dict[str, str] = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
    "NCCL_ENABLE_TIMING": "TORCH_NCCL_ENABLE_TIMING",
}

#: NCCL variables documented for debugging only ("should not be used in production nor retained
#: in scripts"), with what they do. A knob counts when its value is not the harmless default.
DEBUG_KNOBS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "disables NVLink/PCIe peer-to-peer: GPUs on this node talk through "
    "host memory",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport between local processes",
    "NCCL_NET": "forces TCP sockets even where RDMA works",
    "NCCL_P2P_LEVEL": "disables peer-to-peer between GPUs",
    "NCCL_NET_GDR_LEVEL": "disables GPUDirect RDMA",
    "NCCL_ALGO": "forces the collective algorithm",
    "NCCL_PROTO": "forces the protocol",
}


def _on(value: str) -> bool:
    """NCCL reads integer switches with ``strtoll``: anything but 0 (or empty) is on."""
    text = value.strip()
    return bool(text) and text not in ("0", "00")


# Which values of DEBUG_KNOBS do harm; the default or an explicit "allow" does not.
_HARMFUL: dict[str, Callable[[str], bool]] = {
    "NCCL_P2P_DISABLE": _on,
    "NCCL_SHM_DISABLE": _on,
    "NCCL_NET": lambda v: v.strip().lower() == "socket",  # plugin names are legitimate
    "NCCL_P2P_LEVEL": lambda v: v.strip().lower() in ("loc", "0"),
    "NCCL_NET_GDR_LEVEL": lambda v: v.strip().lower() in ("loc", "0"),
    "NCCL_ALGO": lambda v: bool(v.strip()),
    "NCCL_PROTO": lambda v: bool(v.strip()),
}


def _deprecated(facts: Facts) -> list[tuple[str, Finding]]:
    out = []
    for old, new in DEPRECATED.items():
        value = facts.environ.get(old)
        if value is None:
            continue
        current = facts.environ.get(new)
        evidence = [f"{old}={value!r}"]
        if current is None:
            fix = f"export {new}={shlex.quote(value)}; unset {old}"
            evidence.append(f"{new} is unset, so PyTorch uses its default")
        else:
            fix = f"unset {old}"
            evidence.append(f"{new}={current!r} is what PyTorch uses")
        out.append((old, Finding.of(
            "env-deprecated",
            f"{old}={value!r} is deprecated: PyTorch 2.2 and later read {new}",
            tuple(evidence), fix,
        )))
    return out


def _timeouts(facts: Facts) -> list[tuple[str, Finding]]:
    out = []
    for name in ("NCCL_TIMEOUT", "TORCH_NCCL_TIMEOUT"):
        value = facts.environ.get(name)
        if value is None:
            continue
        out.append((name, Finding.of(
            "env-no-such-timeout",
            f"{name}={value!r} is read by neither NCCL nor PyTorch: it changes no timeout",
            (f"{name}={value!r}",
             "the collective timeout is init_process_group(timeout=...), default 10 minutes"),
            "pass timeout=datetime.timedelta(seconds=...) to torch.distributed."
            f"init_process_group and unset {name}",
        )))
    return out


def _hang_switches(facts: Facts) -> list[tuple[str, Finding]]:
    out = []
    monitoring = facts.environ.get("TORCH_NCCL_ENABLE_MONITORING")
    if monitoring is not None and not _on(monitoring):
        out.append(("TORCH_NCCL_ENABLE_MONITORING", Finding.of(
            "hang-detection-disabled",
            f"TORCH_NCCL_ENABLE_MONITORING={monitoring!r}: PyTorch's heartbeat monitor is off, "
            "so a stuck rank is never killed or dumped",
            (f"TORCH_NCCL_ENABLE_MONITORING={monitoring!r}",),
            "unset TORCH_NCCL_ENABLE_MONITORING once the hang it worked around is understood; "
            "raise TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC instead if nodes start far apart",
        )))
    found = facts.user_value("NCCL_IGNORE_NET_MISMATCH")
    if found is not None and _on(found[0]):
        value, origin = found
        out.append(("NCCL_IGNORE_NET_MISMATCH", Finding.of(
            "ignore-net-mismatch",
            f"NCCL_IGNORE_NET_MISMATCH={value!r} turns a network mismatch between nodes (IB on "
            "one, sockets on another) into a silent hang",
            (f"NCCL_IGNORE_NET_MISMATCH={value!r} (from {origin})",),
            "unset NCCL_IGNORE_NET_MISMATCH and make every node use the same transport "
            "(run `clusterenv preflight`)",
        )))
    return out


def _debug_knobs(facts: Facts) -> list[tuple[str, Finding]]:
    out = []
    for name, effect in DEBUG_KNOBS.items():
        found = facts.user_value(name)
        if found is None:
            continue
        value, origin = found
        if not _HARMFUL[name](value):
            continue
        out.append((name, Finding.of(
            "nccl-debug-knob",
            f"{name}={value!r} is a debugging knob left set: it {effect}, which slows or "
            "hangs jobs",
            (f"{name}={value!r} (from {origin})",
             "NCCL's documentation: debug variables should not be used in production nor "
             "retained in scripts"),
            f"unset {name}" + ("" if origin == ENVIRONMENT else f" (remove it from {origin})"),
        )))
    net = facts.user_value("NCCL_NET")
    hca = facts.user_value("NCCL_IB_HCA")
    if net is not None and net[0].strip().lower() == "socket" and hca is not None:
        out.append(("NCCL_NET", Finding.of(
            "nccl-net-contradiction",
            f"NCCL_NET={net[0]!r} forces TCP sockets, yet NCCL_IB_HCA={hca[0]!r} selects RDMA "
            "devices: the settings contradict each other",
            (f"NCCL_NET={net[0]!r} (from {net[1]})", f"NCCL_IB_HCA={hca[0]!r} (from {hca[1]})"),
            "unset NCCL_NET to use RDMA, or unset NCCL_IB_HCA if sockets are really wanted",
        )))
    return out


def env_checks(facts: Facts) -> list[tuple[str, Finding]]:
    """Every environment-only finding, each with the variable it is about."""
    return [
        *_deprecated(facts),
        *_timeouts(facts),
        *_hang_switches(facts),
        *_debug_knobs(facts),
    ]
