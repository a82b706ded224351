"""What asking NCCL for its bootstrap interface costs ``show``, ``doctor`` and ``env``.

Times :func:`clusterenv.nccl.probe.ask_nccl` for one environment (``env``) and for two (the
environment as it stands and with the plan applied: ``show`` and ``doctor``), against a baseline
measured in the same run: starting the same interpreter with ``-I -S`` and doing nothing. The
probe is one such interpreter that loads ``libnccl.so.2`` once and forks a worker per
environment, so its cost over the baseline is NCCL's own work.

Goals (exit 1 when missed): the two-environment probe takes well under a second (at most
0.5 s, median) and at most 8 times the bare interpreter start.

Run: ``python benchmarks/bench_nccl_probe.py [--repeat N]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from clusterenv.nccl.probe import ask_nccl, find_nccl_library

GOAL_SECONDS = 0.5
GOAL_RATIO = 8.0


def timed(label: str, func: Callable[[], object], repeat: int) -> float:
    """Run ``func`` ``repeat`` times; print and return the median in seconds."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    median = statistics.median(samples)
    print(f"{label:52} median {median * 1e3:8.1f} ms   min {min(samples) * 1e3:8.1f} ms")
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    search = find_nccl_library(os.environ)
    if search.library is None:
        print(f"cannot run: {search.note}")
        return 77  # skipped: python -m benchmarks counts it so
    library = search.library
    print(search.note)
    now = dict(os.environ)
    planned = {**now, "NCCL_SOCKET_IFNAME": "=lo"}
    [answer] = ask_nccl([now], library)
    print(f"{answer.by}: bootstraps over {answer.interface} ({answer.address})")
    if not answer.answered:
        print(f"no answer: {answer.error}")
        return 1

    def bare() -> None:
        subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)

    baseline = timed("baseline: python -I -S -c pass", bare, args.repeat)
    timed("ask_nccl, 1 environment (env)", lambda: ask_nccl([now], library), args.repeat)
    two = timed("ask_nccl, 2 environments (show, doctor)",
                lambda: ask_nccl([now, planned], library), args.repeat)
    ratio = two / baseline
    print(f"two environments: {two:.3f} s, {ratio:.1f}x the bare interpreter "
          f"(goals: <= {GOAL_SECONDS} s and <= {GOAL_RATIO:g}x)")
    if two > GOAL_SECONDS or ratio > GOAL_RATIO:
        print("GOAL MISSED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
