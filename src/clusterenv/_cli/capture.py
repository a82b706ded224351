"""``clusterenv capture DIR``: write a host snapshot for a bug report, or to replay in tests;
``clusterenv capture NAME.tar.gz`` writes it as one file to attach."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterenv._cli._archive import (
    ARCHIVE_SUFFIXES,
    archive_top_name,
    is_archive_name,
    is_snapshot_archive,
    open_archive,
    write_archive,
)
from clusterenv._cli._common import add_json, add_root, add_source, emit_json, host_context
from clusterenv._gpus import visible_gpu_count
from clusterenv._root import Root, format_size_limit
from clusterenv._scrub import is_cluster_name, is_secret_name
from clusterenv._shell import command
from clusterenv._text import count, printable
from clusterenv.capture import CaptureError, capture
from clusterenv.network import NetworkInterfaces


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``DIR``, ``--json``, ``--root``."""
    parser.add_argument(
        "dir",
        metavar="DIR",
        help="directory to write: new, empty, or an earlier snapshot (which is replaced); a "
        f"name ending in {' or '.join(ARCHIVE_SUFFIXES)} writes one compressed file to attach "
        "to a bug report",
    )
    add_json(parser)
    add_root(parser)
    add_source(parser)


def run(args: argparse.Namespace) -> int:
    """Capture, then read the snapshot back for a one-line summary; exit 0, or 2 on failure."""
    environ, root = host_context(args)
    cleanup: Callable[[], None] | None = None
    if is_archive_name(args.dir):
        shown = _capture_archive(Path(args.dir), environ, root)
        snapshot, cleanup = open_archive(args.dir)  # read back what the file holds
    else:
        shown = str(capture(args.dir, environ=environ, root=root).resolve())
        snapshot = Root(args.dir)
    try:
        return _report(args, environ, snapshot, shown)
    finally:
        if cleanup is not None:
            cleanup()


def _capture_archive(dest: Path, environ: dict[str, str], root: Root) -> str:
    """Capture into a temporary directory, then write it as the archive ``dest``."""
    if os.path.lexists(dest) and not (dest.is_file() and not dest.is_symlink()
                                      and is_snapshot_archive(dest)):
        raise CaptureError(
            f"refusing to overwrite {str(dest)!r}: it is not a snapshot archive; give a new "
            "file name (or remove it)", path=str(dest))
    with tempfile.TemporaryDirectory(prefix="clusterenv-capture-") as staging:
        path = capture(Path(staging) / archive_top_name(dest), environ=environ, root=root)
        try:
            write_archive(path, dest)
        except OSError as e:
            raise CaptureError(
                f"cannot write the snapshot archive {str(dest)!r}: {e.strerror or e}; free some "
                "space or choose another place", path=str(dest)) from e
    return str(dest.resolve())


def _report(args: argparse.Namespace, environ: dict[str, str], snapshot: Root,
            shown: str) -> int:
    network = NetworkInterfaces.detect(root=snapshot)
    rdma = [
        d for d in snapshot.listdir("sys/class/infiniband")
        if snapshot.is_dir(f"sys/class/infiniband/{d}")
    ]
    recorded = snapshot.recorded_environ() or {}
    withheld = sorted(
        name
        for name in environ
        if is_cluster_name(name) and is_secret_name(name)
    )
    recorded_skips = snapshot.host.get("skipped")
    skipped = {str(k): int(v) for k, v in recorded_skips.items()
               if isinstance(v, int)} if isinstance(recorded_skips, dict) else {}
    summary: dict[str, Any] = {
        "path": shown,
        "interfaces": list(network.names),
        "rdma_devices": rdma,
        "gpus": visible_gpu_count({}, snapshot),
        "environ": sorted(recorded),
        "withheld_secrets": withheld,
        "skipped": skipped,
    }
    if args.json:
        emit_json(summary)
        return 0
    print(f"wrote host snapshot to {printable(summary['path'])}")
    line = (
        f"{count(len(network), 'interface')} ({printable(', '.join(network.names)) or 'none'}), "
        f"{count(len(rdma), 'RDMA device')}, {count(summary['gpus'], 'GPU')}, "
        f"{count(len(recorded), 'environment variable')} recorded"
    )
    if withheld:
        line += f" ({len(withheld)} left out as secrets: {printable(', '.join(withheld))})"
    print(line + "; MACs, GUIDs and GPU UUIDs scrubbed")
    for name, limit in skipped.items():
        print(f"left out: /{printable(name)} is larger than {format_size_limit(limit)}, the most "
              "clusterenv reads of it; the checks that need it are skipped")
    print(f"replay it with: {printable(command('clusterenv', 'doctor', '--root', args.dir))}")
    return 0
