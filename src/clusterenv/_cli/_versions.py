"""What to paste into a bug report: the versions block of ``show`` and the ``versions`` object
of ``show --json`` and ``doctor --json``.

clusterenv, Python, torch (from its installed metadata: torch is never imported), every piece
of NCCL version evidence clusterenv found, the OS and the kernel. Under ``--root`` the values
are the ones the snapshot recorded when it was captured, not this machine's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from clusterenv import __version__
from clusterenv.host import software_versions

if TYPE_CHECKING:
    from clusterenv._facts import Facts
    from clusterenv._root import Root

__all__ = ["version_rows", "versions"]


def versions(facts: Facts, root: Root) -> dict[str, Any]:
    """The ``versions`` object, e.g. ``{"clusterenv": "0.1.0", "python": "3.11.7", "torch":
    "2.13.0+cpu", "nccl": [{"version": "2.21.5", "source": "nvidia-nccl-cu12 2.21.5 (pip)"}],
    "os": "Ubuntu 24.04.1 LTS", "kernel": "6.8.0-49-generic", "machine": "x86_64",
    "snapshot": None}``.

    ``torch`` is None when it is not installed. ``snapshot`` is None on the live host; under
    ``--root`` it is ``{"recorded": bool, "captured_with": "0.1.0"}`` and the other values are
    the snapshot's (None where it recorded none).
    """
    software = software_versions(root)
    snapshot = None
    if not root.is_live:
        captured_with = root.host.get("clusterenv")
        snapshot = {"recorded": bool(software),
                    "captured_with": captured_with if isinstance(captured_with, str) else None}
    return {
        "clusterenv": __version__,
        "python": software.get("python"),
        "torch": software.get("torch"),
        "nccl": [{"version": str(v), "source": v.source} for v in facts.nccl_versions],
        "os": software.get("os"),
        "kernel": software.get("kernel"),
        "machine": software.get("machine"),
        "snapshot": snapshot,
    }


def version_rows(data: dict[str, Any]) -> tuple[str, list[tuple[str, object]]]:
    """The block's heading and its ``(label, value)`` rows, from :func:`versions`."""
    snapshot = data["snapshot"]
    missing = "unknown"
    heading = "versions (paste them into a bug report)"
    clusterenv = data["clusterenv"]
    if snapshot is not None:
        heading = "versions (recorded in the snapshot; paste them into a bug report)"
        missing = "not recorded in the snapshot" if not snapshot["recorded"] else "unknown"
        captured = snapshot["captured_with"] or "an unknown version"
        clusterenv = f"{clusterenv} (the snapshot was captured with {captured})"
    torch = data["torch"]
    if torch is None:
        torch = missing if snapshot is not None and not snapshot["recorded"] else "not installed"
    nccl = ", ".join(f"{item['version']} ({item['source']})" for item in data["nccl"])
    kernel = data["kernel"]
    if kernel and data["machine"]:
        kernel = f"{kernel} ({data['machine']})"
    return heading, [
        ("clusterenv", clusterenv),
        ("Python", data["python"] or missing),
        ("torch", torch),
        ("NCCL", nccl or "none found"),
        ("OS", data["os"] or missing),
        ("kernel", kernel or missing),
    ]
