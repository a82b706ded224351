"""Checks on NCCL and PyTorch variables alone: deprecated names, leftover debug knobs, switches
that hide failures, RDMA settings outside what the hardware accepts.

Each check returns ``(variable, Finding)`` pairs: the plan keeps every such variable (clusterenv
never changes them) and warns about it; ``doctor`` shows the findings.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from clusterenv._facts import ENVIRONMENT, Facts
from clusterenv.findings import Finding, Severity

__all__ = ["DEBUG_KNOBS", "DEPRECATED", "IB_SETTING_RANGES", "env_checks", "ib_setting_problem"]

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


#: NCCL settings that NCCL copies into a verbs queue-pair attribute, with the range of that
#: attribute, NCCL's default and what it is. NCCL sets ``qpAttr.timeout``, ``qpAttr.retry_cnt``,
#: ``ah_attr.sl`` and ``ah_attr.grh.traffic_class`` from them (``src/transport/net_ib``) without
#: checking the range. The widths are the InfiniBand Architecture Specification's fields behind
#: ``struct ibv_qp_attr`` (rdma-core ``libibverbs/man/ibv_modify_qp.3``): Local ACK Timeout 5 bits
#: (4.096 us * 2^timeout; 0 means wait forever), Retry Count 3 bits, Service Level 4 bits,
#: Traffic Class 8 bits. Used by ``doctor`` (the live environment) and ``nccl-log`` (what NCCL
#: printed as ``NCCL_IB_RETRY_CNT set by environment to 15.``).
IB_SETTING_RANGES: dict[str, tuple[int, int, int | None, str]] = {
    # the default timeout changed between NCCL versions: not named in the fix
    "NCCL_IB_TIMEOUT": (1, 31, None, "the verbs Local ACK Timeout (5 bits: 4.096 us * 2^value)"),
    "NCCL_IB_RETRY_CNT": (0, 7, 7, "the verbs Retry Count (3 bits)"),
    "NCCL_IB_SL": (0, 15, 0, "the InfiniBand Service Level (4 bits)"),
    "NCCL_IB_TC": (0, 255, 0, "the GRH Traffic Class (8 bits; DSCP << 2 on RoCE)"),
}
_INT64 = 2**63


def _strtoll(text: str) -> int | None:
    """``strtoll(text, NULL, 0)`` as NCCL reads integer settings (``src/misc/param.cc``):
    ``0x`` hexadecimal, a leading ``0`` octal, the longest numeric prefix, 0 when there is none;
    None on overflow (NCCL then keeps its default)."""
    rest = text.lstrip(" \t\n\r\f\v")
    sign = -1 if rest[:1] == "-" else 1
    rest = rest[1:] if rest[:1] in "+-" and rest else rest
    base, digits = 10, "0123456789"
    if rest[:2].lower() == "0x" and rest[2:3] and rest[2:3].lower() in "0123456789abcdef":
        base, digits, rest = 16, "0123456789abcdef", rest[2:]
    elif rest[:1] == "0":
        base, digits = 8, "01234567"
    end = 0
    while end < len(rest) and end < 80 and rest[end].lower() in digits:
        end += 1
    value = sign * int(rest[:end], base) if end else 0
    return value if -_INT64 <= value < _INT64 else None


def ib_setting_problem(name: str, value: str) -> tuple[Severity, str, str] | None:
    """Why an ``NCCL_IB_*`` queue-pair setting is wrong, or None (also for other names).

    Args:
        name: e.g. ``"NCCL_IB_RETRY_CNT"``.
        value: As set (``"15"``, ``"0x10"``) or as NCCL logged it (``"15"``).

    Returns:
        ``(severity, reason, fix)``, e.g. ``("error", "NCCL_IB_RETRY_CNT=15 is outside 0-7, the
        range of the verbs Retry Count (3 bits)", "set NCCL_IB_RETRY_CNT to 0-7 ...")``.
    """
    spec = IB_SETTING_RANGES.get(name)
    if spec is None or not value.strip():
        return None
    low, high, default, what = spec
    number = _strtoll(value)
    shown = f"{name}={value.strip()!r}"
    fix = f"set {name} within {low}-{high}, or unset it (NCCL's default is {default})" if (
        default is not None) else f"set {name} within {low}-{high}, or unset it (NCCL's default)"
    if number is None:
        return "warning", f"{shown} is too large for NCCL to read: NCCL ignores it", f"unset {name}"
    read = "" if value.strip() == str(number) else f" (NCCL reads it as {number})"
    if name == "NCCL_IB_TIMEOUT" and number == 0:
        return ("warning", f"{shown}{read} disables the verbs ACK timeout: a lost peer makes "
                "every rank wait forever instead of failing", fix)
    if not low <= number <= high:
        return ("error", f"{shown}{read} is outside {low}-{high}, the range of {what}: the "
                "RDMA driver refuses the queue pair (ibv_modify_qp fails) or keeps only the low "
                "bits", fix)
    if read and not value.strip().lstrip("+-").isdigit():
        return "warning", f"{shown}{read}: not a plain number", fix
    return None


def _ib_ranges(facts: Facts) -> list[tuple[str, Finding]]:
    out = []
    for name in IB_SETTING_RANGES:
        found = facts.user_value(name)
        if found is None:
            continue
        value, origin = found
        problem = ib_setting_problem(name, value)
        if problem is None:
            continue
        severity, reason, fix = problem
        out.append((name, Finding.of(
            "nccl-ib-setting-range", reason, (f"{name}={value!r} (from {origin})",), fix,
            severity=severity,
        )))
    return out


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
        *_ib_ranges(facts),
    ]
