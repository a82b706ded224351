"""Throughput of read_nccl_log() on a large log, against the floor of reading it line by line.

Builds a log of ``--size-mb`` (default 100 MB) by repeating the lines of the real NCCL logs in
tests/data/nccl_logs/real/ (every line an NCCL line: the worst case; real job logs interleave
training output, which costs one substring test per line). Three timings, best of ``--repeat``:

- floor: ``for line in open(path): pass`` (decoding included, as the parser pays it too);
- scan: the least any Python line parser does: find the ``NCCL INFO`` marker, slice the message;
- parse: ``read_nccl_log(path)``.

``--unique-pids`` gives every repetition new process ids, so that nothing is repeated verbatim
(the caches keyed by line and by line prefix then miss; the cache keyed by message text still
hits, as it does in real logs where every rank prints the same messages). Its ratio is printed
for information; the goal is set on the default log.

Memory: a file of ``--no-newline-mb`` (default 1000) MB without a newline is parsed in a child
process whose peak RSS is printed next to that of a child that only imports clusterenv.

Goals (exit 1 when missed): parse <= 5x the floor (CPU time, best of ``--repeat``, same run),
and the no-newline file parsed in under 200 MB more than the import alone.

Run: ``python benchmarks/bench_nccl_log.py [--size-mb 100] [--repeat 3] [--unique-pids]
[--no-newline-mb 1000]``
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
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
    """The least CPU time of ``repeat`` runs of each, interleaved so that load hits all alike.

    CPU time of this process (not wall time) keeps other processes on a shared machine out of
    the ratio.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            start = time.process_time()
            fn(path)
            times[name].append(time.process_time() - start)
    return {name: min(values) for name, values in times.items()}


GOAL_RATIO = 5.0
GOAL_EXTRA_RSS_MB = 200.0
# The child's own peak (VmHWM): getrusage's ru_maxrss survives exec, so it would report this
# process's peak after it parsed 100 MB.
_RSS = """
import re, sys
import clusterenv.nccl_log
if len(sys.argv) > 1:
    log = clusterenv.nccl_log.read_nccl_log(sys.argv[1])
    assert log.lines_read == 1, log.lines_read
print(int(re.search(r"VmHWM:\\s*(\\d+)", open("/proc/self/status").read()).group(1)) / 1024)
"""


def write_no_newline(path: Path, size: int) -> None:
    """``size`` bytes of real NCCL lines joined without a newline."""
    block = "".join(line.rstrip("\n") + " " for line in real_lines()).encode()
    with open(path, "wb") as out:
        for _ in range(size // len(block)):
            out.write(block)


def peak_rss_mb(*args: str) -> float:
    """Peak RSS of a child that imports clusterenv.nccl_log (and parses ``args[0]``)."""
    out = subprocess.run([sys.executable, "-c", _RSS, *args], check=True, capture_output=True,
                         text=True)
    return float(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--unique-pids", action="store_true")
    parser.add_argument("--no-newline-mb", type=float, default=1000.0)
    args = parser.parse_args()
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nccl.log"
        size = write_log(path, int(args.size_mb * 1e6), unique_pids=args.unique_pids)
        megabytes = size / 1e6
        log = read_nccl_log(path)
        print(f"log: {megabytes:.1f} MB, {log.lines_read} lines, {log.lines_matched} NCCL lines, "
              f"{len(log.ranks)} processes")
        results = best({"floor": floor, "scan": scan, "parse": parse}, path, args.repeat)
        path.unlink()
        for name, seconds in results.items():
            ratio = seconds / results["floor"]
            print(f"{name:6} {seconds:7.3f} s  {megabytes / seconds:8.1f} MB/s  x{ratio:5.1f} "
                  "floor (CPU time)")
        print(f"parse / scan: x{results['parse'] / results['scan']:.2f}")
        ratio = results["parse"] / results["floor"]
        if args.unique_pids:
            print(f"ratio {ratio:.1f} with unique process ids (information; the goal is set on "
                  "the default log)")
        else:
            print(f"ratio {ratio:.1f} (goal <= {GOAL_RATIO:.0f})")
            if ratio > GOAL_RATIO:
                failed.append(f"parse is {ratio:.1f}x the floor, goal {GOAL_RATIO:.0f}x")
        if args.no_newline_mb > 0:
            joined = Path(tmp) / "joined.log"
            write_no_newline(joined, int(args.no_newline_mb * 1e6))
            start = time.perf_counter()
            rss = peak_rss_mb(str(joined))
            seconds = time.perf_counter() - start
            base = peak_rss_mb()
            extra = rss - base
            print(f"no newline: {joined.stat().st_size / 1e6:.0f} MB parsed in {seconds:.1f} s, "
                  f"peak RSS {rss:.0f} MB (import alone {base:.0f} MB, +{extra:.0f} MB; goal "
                  f"<= +{GOAL_EXTRA_RSS_MB:.0f} MB)")
            if extra > GOAL_EXTRA_RSS_MB:
                failed.append(f"peak RSS +{extra:.0f} MB on a file without newlines")
    if failed:
        print("GOAL MISSED: " + "; ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
