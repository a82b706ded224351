"""The RDMA devices one process listed: RoCE among InfiniBand ports (or the reverse), and
devices of another driver among the others (an iWARP or soft-RoCE NIC beside mlx5 ports, which
NCCL lists as ``/RoCE`` too: it prints the link layer, Ethernet, not the protocol)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from clusterenv._shell import export
from clusterenv._shell import quote as shell_quote
from clusterenv.findings import Code, Finding
from clusterenv.nccl_log.interfaces import finding, quote
from clusterenv.nccl_log.model import NcclLog, NetDevice

__all__ = ["CODE_MIXED_LINK_LAYER", "CODE_MIXED_RDMA_DRIVER", "driver_family",
           "link_layer_checks"]

CODE_MIXED_LINK_LAYER: Code = "log-mixed-link-layer"
CODE_MIXED_RDMA_DRIVER: Code = "log-mixed-rdma-driver"
# rdma-core's udev names say the protocol: ibp* (InfiniBand), rocep* (RoCE), iwp* (iWARP)
_UDEV = re.compile(r"(ibp|rocep|iwp)[0-9]", re.ASCII)
_NUMBERED = re.compile(r"(?:_bond)?_?[0-9]+(?:_[0-9]+)*$", re.ASCII)
# drivers whose Ethernet ports speak iWARP (or may: irdma and qedr do both), and software RDMA
_NOT_ROCE = {"iwp": "iWARP", "i40iw": "iWARP", "iw_cxgb4": "iWARP", "cxgb4": "iWARP",
             "siw": "software iWARP", "irdma": "iWARP or RoCE", "qedr": "iWARP or RoCE",
             "rxe": "software RoCE"}


@lru_cache(maxsize=4096)
def driver_family(name: str) -> str:
    """The driver a device name belongs to: ``mlx5_0`` and ``mlx5_bond_0`` -> ``mlx5``,
    ``irdma1`` -> ``irdma``, ``bnxt_re0`` -> ``bnxt_re``, ``iwp24s0f0`` -> ``iwp``."""
    udev = _UDEV.match(name)
    if udev:
        return udev.group(1)
    return _NUMBERED.sub("", name) or name


def _describe_layer(odd: str, others: list[str]) -> tuple[str, str]:
    other = "InfiniBand" if odd == "RoCE" else "RoCE"
    return (f"{odd} ({'Ethernet' if odd == 'RoCE' else 'InfiniBand'} link layer) among {other} "
            "ports", f"together with {other} ports: they are different fabrics")


def _describe_driver(odd: str, others: list[str]) -> tuple[str, str]:
    what = _NOT_ROCE.get(odd, "another RDMA driver")
    return (f"driver {odd} ({what}) among {', '.join(others)} ports",
            f"together with {', '.join(others)} ports: NCCL lists every Ethernet RDMA port as "
            "RoCE, but these are another driver's")


def link_layer_checks(log: NcclLog) -> list[Finding]:
    """One finding per odd group of devices in a process's ``NET/IB : Using`` list: by link
    layer first, then (among ports of one link layer) by driver."""
    findings = _mixed(log, lambda d: str(d.link_layer), CODE_MIXED_LINK_LAYER, _describe_layer,
                      prefer="RoCE")
    if not findings:
        findings = _mixed(log, lambda d: driver_family(d.name), CODE_MIXED_RDMA_DRIVER,
                          _describe_driver, prefer=None)
    return findings


def _mixed(log: NcclLog, key: Callable[[NetDevice], str], code: Code,
           describe: Callable[[str, list[str]], tuple[str, str]],
           prefer: str | None) -> list[Finding]:
    by_label = {d.label: d for d in log.devices}
    findings = []
    seen: set[tuple[str, ...]] = set()
    failing = [m for kind in ("ib-completion", "ib-qp", "fatal") for m in log.messages(kind)]
    lists: set[tuple[str, ...]] = set()
    for rank in log.ranks:
        if rank.devices in lists:
            continue  # the same list as another process's: judged once
        lists.add(rank.devices)
        devices = [by_label[label] for label in rank.devices if label in by_label]
        devices = [d for d in devices if d.link_layer in ("IB", "RoCE") and d.network != "OFI"]
        groups: dict[str, list[str]] = {}
        for device in devices:
            groups.setdefault(key(device), []).append(device.name)
        if len(groups) < 2:
            continue
        # the minority is the odd one out; on a tie, RoCE (a front-end port on IB compute nodes)
        odd = min(groups, key=lambda g: (len(groups[g]), g != prefer))
        keep = [d for d in devices if key(d) != odd]
        names = tuple(groups[odd])
        if names in seen:
            continue
        seen.add(names)
        odd_index = {d.index for d in devices if key(d) == odd}
        via_odd = any(network != "Socket" and index in odd_index
                      for r in log.ranks for network, index in r.channel_devices)
        what, title = describe(odd, [g for g in groups if g != odd])
        evidence = [f"{rank.label} listed " + ", ".join(d.label for d in devices),
                    f"{', '.join(names)}: {what}"]
        if via_odd:
            evidence.append("channels go through it: `via NET/.../"
                            f"{'|'.join(map(str, sorted(i for i in odd_index if i is not None)))}`")
        evidence += quote(failing)
        hca = log.env.get("NCCL_IB_HCA")
        if hca:
            evidence.append(f"NCCL_IB_HCA set by environment to {hca}")
        wanted = ",".join(f"{d.name}:{d.port}" if d.port is not None else d.name for d in keep)
        findings.append(finding(
            code, "error" if failing and via_odd else "warning",
            f"NCCL uses {', '.join(names)} ({odd}) {title}, and rings through them fail or "
            "crawl",
            tuple(evidence),
            f"select the ports of one fabric: {export('NCCL_IB_HCA', '=' + wanted)} (the "
            "leading `=` means exactly these names) on every node" + (
                f", instead of NCCL_IB_HCA={shell_quote(hca)}" if hca else ""),
        ))
    return findings
