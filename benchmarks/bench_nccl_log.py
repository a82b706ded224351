"""Throughput of read_nccl_log() on a large log, against the floor of reading it line by line.

Builds a log of ``--size-mb`` (default 100 MB) by repeating the lines of the real NCCL logs in
tests/data/nccl_logs/real/ (every line an NCCL line: the worst case; real job logs interleave
training output, which costs one substring test per line). Three timings, best of ``--repeat``:

- floor: ``for line in open(path): pass`` (decoding included, as the parser pays it too);
- scan: the least any Python line parser does: find the ``NCCL INFO`` marker, slice the message;
- parse: ``read_nccl_log(path)``.

``--unique-pids`` gives every repetition new process ids, so that nothing is repeated verbatim
(the caches keyed by line prefix then miss; the cache keyed by message text still hits, as it
does in real logs where every rank prints the same messages).

Run: ``python benchmarks/bench_nccl_log.py [--size-mb 100] [--repeat 3] [--unique-pids]``
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from clusterenv.nccl_log import read_nccl_log

REAL = Path(__file__).resolve().parents[1] / "tests" / "data" / "nccl_logs" / "real"
_PID = re.compile(r"^([^\s:]+):(\d+):(\d+) ")


def real_lines() -> list[str]:
    lines = []
    for path in sorted(REAL.glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        lines += [line + "\n" for line in text.splitlines() if not line.startswith("# source:")]
    return lines


def renumbered(lines: list[str], offset: int) -> list[str]:
    """The lines with every pid shifted by ``offset`` (other processes, same messages)."""

    def shift(match: re.Match[str]) -> str:
        return f"{match[1]}:{int(match[2]) + offset}:{match[3]} "

    return [_PID.sub(shift, line) for line in lines] if offset else lines


def write_log(path: Path, size: int, *, unique_pids: bool) -> int:
    lines = real_lines()
    written = repetition = 0
    with open(path, "w", encoding="utf-8") as out:
        while written < size:
            chunk = "".join(renumbered(lines, repetition * 1_000_000 if unique_pids else 0))
            out.write(chunk)
            written += len(chunk.encode("utf-8"))
            repetition += 1
    return os.path.getsize(path)


def floor(path: Path) -> None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for _ in handle:
            pass


def scan(path: Path) -> None:
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            pos = line.find("NCCL INFO ")
            if pos >= 0:
                line[pos + 10 :].strip()


def parse(path: Path) -> None:
    read_nccl_log(path)


def best(fns: dict[str, Callable[[Path], None]], path: Path, repeat: int) -> dict[str, float]:
    """The fastest of ``repeat`` runs of each, interleaved so that load spikes hit all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(path)
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--unique-pids", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        size = write_log(path, int(args.size_mb * 1e6), unique_pids=args.unique_pids)
        megabytes = size / 1e6
        log = read_nccl_log(path)
        print(f"log: {megabytes:.1f} MB, {log.lines_read} lines, {log.lines_matched} NCCL lines, "
              f"{len(log.ranks)} processes")
        results = best({"floor": floor, "scan": scan, "parse": parse}, path, args.repeat)
    for name, seconds in results.items():
        ratio = seconds / results["floor"]
        print(f"{name:6} {seconds:7.3f} s  {megabytes / seconds:8.1f} MB/s  x{ratio:5.1f} floor")
    print(f"parse / scan: x{results['parse'] / results['scan']:.2f}")


if __name__ == "__main__":
    main()
